package probe

import (
	"strings"
	"testing"
)

func TestNoCUDAError(t *testing.T) {
	tests := []struct{ goos, want string }{
		{"darwin", "no CUDA on macOS"},
		{"ios", "no CUDA on iOS"},
		{"plan9", "no CUDA on plan9"},
	}
	for _, tt := range tests {
		t.Run(tt.goos, func(t *testing.T) {
			e := &NoCUDAError{OS: osName(tt.goos)}
			if got := e.Error(); !strings.HasPrefix(got, tt.want) {
				t.Errorf("Error() = %q, want prefix %q", got, tt.want)
			}
			if h := e.Hint(); !strings.Contains(h, "estimate, tune and check need no GPU") {
				t.Errorf("Hint() = %q", h)
			}
		})
	}
}

// TestNoLoaderError: a -tags nodriver binary's probe says how it was built
// and what works without the driver.
func TestNoLoaderError(t *testing.T) {
	e := &NoLoaderError{}
	if got := e.Error(); !strings.Contains(got, "built with -tags nodriver") || !strings.Contains(got, libcuda) {
		t.Errorf("Error() = %q", got)
	}
	if h := e.Hint(); !strings.Contains(h, "estimate, tune and check need no GPU") || !strings.Contains(h, "without -tags nodriver") {
		t.Errorf("Hint() = %q", h)
	}
}
