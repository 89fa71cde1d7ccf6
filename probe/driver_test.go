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
