package tuner

// search is Largest's state: the bracket [fit, fail) with the values
// there.
type search struct {
	c        Constraints
	limit    int64
	eval     func(int64) (int64, error)
	fit, fv  int64
	fail, fw int64 // fail 0: no failing batch known yet
	flat     bool  // the last step landed on its side's value
	// moved is the side of the bracket the last step moved (+1 the
	// fitting end, −1 the failing one, 0 none yet); wv and ww are the
	// weights of the fitting and failing ends' distances from the limit
	// in the secant, halved for an end that stays while the other moves
	// twice (the Illinois rule), so that a curved stretch, where one end
	// would never move, still closes from both sides.
	moved  int
	wv, ww float64
}

// bracket walks up from next, extrapolating from the line through the
// last two fitting points, until a batch fails or no larger batch is
// valid. Each step goes to the first batch the line puts over the limit,
// or doubles where that is nearer than doubling; a nearer one is tried
// once (it usually fails and closes the bracket: the line is close near
// the limit), and if it fits the next step doubles.
func (s *search) bracket(next int64) error {
	c, limit := s.c, s.limit
	short := false // the last step was a short one
	for next != 0 && s.fail == 0 {
		v, err := s.eval(next)
		if err != nil {
			return err
		}
		if v > limit {
			s.fail, s.fw = next, v
			break
		}
		g := next * 2
		if per := float64(v-s.fv) / float64(next-s.fit); per > 0 {
			cross := next + int64(float64(limit-v)/per) + 1
			if cross < g && short {
				short = false
			} else {
				short = cross < g
				g = cross
			}
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
	v, err := s.eval(b)
	if err != nil {
		return err
	}
	side := -1
	if v <= s.limit {
		s.flat = v == s.fv
		s.fit, s.fv, s.wv, side = b, v, 1, 1
	} else {
		s.flat = v == s.fw
		s.fail, s.fw, s.ww = b, v, 1
	}
	if side == s.moved {
		if side > 0 {
			s.ww /= 2
		} else {
			s.wv /= 2
		}
	}
	s.moved = side
	return nil
}

// secant returns where the line through the bracket's ends, their
// distances from the limit weighted (wv, ww), crosses it.
func (s *search) secant() int64 {
	below := s.wv * float64(s.limit-s.fv)
	above := s.ww * float64(s.fw-s.limit)
	if below+above > 0 {
		return s.fit + int64(below/(below+above)*float64(s.fail-s.fit))
	}
	return s.fit + (s.fail-s.fit)/2
}

// narrow closes the bracket by secant steps, bisecting after a flat step
// or a round that did not halve it.
func (s *search) narrow() (int64, error) {
	c := s.c
	var prev [2]int64 // the bracket's width one and two rounds ago
	s.wv, s.ww, s.moved = 1, 1, 0
	for s.fail != 0 {
		if c.below(s.fail-1) <= s.fit || float64(s.fail-s.fit) <= c.Tolerance*float64(s.fit) {
			break
		}
		width := s.fail - s.fit
		stalled := prev[1] > 0 && width > prev[1]/2
		prev = [2]int64{width, prev[0]}
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
