//go:build unix

package probe

import (
	"context"
	"errors"
	"os/signal"
	"syscall"
	"testing"
)

// TestProbeSignalFreesEverything sends the process SIGTERM in the middle
// of a probe (Unix only: Windows has no kill(2)).
func TestProbeSignalFreesEverything(t *testing.T) {
	f := h100()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	f.Hook = func(n int) {
		if n == 40 {
			syscall.Kill(syscall.Getpid(), syscall.SIGTERM)
			<-ctx.Done()
		}
	}
	_, err := Run(ctx, f, spec(t, "gpt2-124m.yaml"), band)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if f.Live() != 0 || f.ContextOpen() {
		t.Errorf("after SIGTERM: %d allocations left, context open %v", f.Live(), f.ContextOpen())
	}
}
