package main

import "testing"

func TestCommasAndSeconds(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{{0, "0"}, {999, "999"}, {1000, "1,000"}, {64056, "64,056"}, {1234567, "1,234,567"}} {
		if got := commas(c.n); got != c.want {
			t.Errorf("commas(%d) = %q, want %q", c.n, got, c.want)
		}
	}
	for _, c := range []struct {
		v    float64
		want string
	}{{0.5123, "0.512 s"}, {28.24, "28.2 s"}, {642.4, "642 s"}, {999.4, "999 s"}, {999.6, "1,000 s"}, {1150.2, "1,150 s"}, {183942, "183,942 s"}} {
		if got := seconds(c.v); got != c.want {
			t.Errorf("seconds(%g) = %q, want %q", c.v, got, c.want)
		}
	}
}
