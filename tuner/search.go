package tuner

import "sort"

// point is one evaluation of Largest's search.
type point struct{ b, v int64 }

// search is Largest's state: the bracket [fit, fail) with the values
// there, and every evaluation so far (pts): the secant through the two
// closest to the limit predicts where the limit is crossed better than the
// bracket's ends, one of which may be far away.
type search struct {
	c        Constraints
	limit    int64
	eval     func(int64) (int64, error)
	pts      []point
	fit, fv  int64
	fail, fw int64 // fail 0: no failing batch known yet
	flat     bool  // the last step landed on its side's value
}

func (s *search) ev(b int64) (int64, error) {
	v, err := s.eval(b)
	if err == nil {
		s.pts = append(s.pts, point{b, v})
	}
	return v, err
}

// bracket walks up from next, extrapolating from the line through the
// last two fitting points (at least doubling), until a batch fails or no
// larger batch is valid.
func (s *search) bracket(next int64) error {
	c, limit := s.c, s.limit
	for next != 0 && s.fail == 0 {
		v, err := s.ev(next)
		if err != nil {
			return err
		}
		if v > limit {
			s.fail, s.fw = next, v
			break
		}
		g := next * 2
		if per := float64(v-s.fv) / float64(next-s.fit); per > 0 {
			g = max(g, next+int64(float64(limit-v)/per)+1)
		}
		s.fit, s.fv = next, v
		if c.Max > 0 && g > c.Max {
			g = c.Max
		}
		n := c.below(g)
		if n <= s.fit {
			n = nextValid(c, s.fit)
		}
		if n == 0 || (c.Max > 0 && s.fit >= c.Max) {
			break
		}
		next = n
	}
	return nil
}

// try evaluates b and moves the bracket's end on its side. A step that
// lands on the value its side of the bracket already had has found a flat
// stretch (the allocator rounds): the secant says nothing there, so the
// next step bisects.
func (s *search) try(b int64) error {
	v, err := s.ev(b)
	if err != nil {
		return err
	}
	if v <= s.limit {
		s.flat = v == s.fv
		s.fit, s.fv = b, v
	} else {
		s.flat = v == s.fw
		s.fail, s.fw = b, v
	}
	return nil
}

func (s *search) secant() int64 {
	limit := s.limit
	p := append([]point(nil), s.pts...) // fit and fail are among them
	sort.Slice(p, func(i, j int) bool { return abs(p[i].v-limit) < abs(p[j].v-limit) })
	for j := 1; j < len(p); j++ {
		if p[j].v != p[0].v && p[j].b != p[0].b {
			per := float64(p[j].v-p[0].v) / float64(p[j].b-p[0].b)
			if per > 0 {
				return p[0].b + int64(float64(limit-p[0].v)/per)
			}
		}
	}
	return s.fit + (s.fail-s.fit)/2
}

// narrow closes the bracket by secant steps, bisecting after a flat step
// or a round that did not halve it.
func (s *search) narrow() (int64, error) {
	c := s.c
	var prev int64 // the bracket's width a round ago
	for s.fail != 0 {
		if c.below(s.fail-1) <= s.fit || float64(s.fail-s.fit) <= c.Tolerance*float64(s.fit) {
			break
		}
		width := s.fail - s.fit
		stalled := prev > 0 && width > prev/2
		prev = width
		g, sec := s.fit+width/2, false
		if !s.flat && !stalled {
			g, sec = s.secant(), true
		}
		g = max(s.fit+1, min(g, s.fail-1))
		cand := c.below(g)
		if cand <= s.fit {
			cand = c.below(s.fail - 1)
		}
		if err := s.try(cand); err != nil {
			return s.fit, err
		}
		if sec && s.fit == cand {
			// The secant usually lands close: check just above.
			if up := nextValid(c, s.fit); up != 0 && up < s.fail {
				if err := s.try(up); err != nil {
					return s.fit, err
				}
				s.flat = false
			}
		}
	}
	return s.fit, nil
}
