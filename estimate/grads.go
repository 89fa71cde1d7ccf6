package estimate

// accumulate adds g to t's gradient. A parameter whose .grad is None steals
// the buffer (AccumulateGrad); otherwise the sum is made in place and g is
// dropped. Views pass their gradient to the base's producer unchanged.
func (s *sim) accumulate(t, g *tensor) {
	if t.param && s.cfg.zero >= 2 && !s.noSync {
		s.reduceScatter(t, g)
		return
	}
	if t.param && t.pgrad == nil && s.buckets != nil && s.cfg.bucketView {
		// gradient_as_bucket_view: AccumulateGrad copies into the
		// parameter's bucket slice, which becomes its .grad.
		t.pgrad = s.view(s.buckets, t.bytes())
		s.unref(g)
		return
	}
	if t.param {
		if t.pgrad == nil {
			t.pgrad = g
			g.fixed = catGrad
			s.recat(g)
			return
		}
		s.unref(g)
		return
	}
	if t.grad == nil {
		t.grad = g
		return
	}
	s.unref(g)
}
