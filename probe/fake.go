package probe

import (
	"fmt"
	"sync"
)

// Fake is a device for tests: memory is handed out in Granularity units,
// a context costs ContextBytes, other processes hold OthersBytes, and
// FailAfter makes the n-th allocation fail. Hook runs before each
// allocation.
type Fake struct {
	Name         string
	Total        int64
	ContextBytes int64
	OthersBytes  int64
	Granularity  int64
	FailAfter    int // 0: never
	NoDevice     bool
	Hook         func(n int)

	mu     sync.Mutex
	used   int64
	live   map[uintptr]int64
	next   uintptr
	allocs int
	open   bool
}

// Live is the number of allocations not yet freed.
func (f *Fake) Live() int { f.mu.Lock(); defer f.mu.Unlock(); return len(f.live) }

// ContextOpen says whether a context is still open.
func (f *Fake) ContextOpen() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.open }

// Version implements Driver.
func (f *Fake) Version() (int, error) { return 13000, nil }

// DeviceCount implements Driver.
func (f *Fake) DeviceCount() (int, error) {
	if f.NoDevice {
		return 0, nil
	}
	return 1, nil
}

// DeviceName implements Driver.
func (f *Fake) DeviceName(i int) (string, error) {
	if i != 0 || f.NoDevice {
		return "", fmt.Errorf("invalid device ordinal %d", i)
	}
	return f.Name, nil
}

// OpenContext implements Driver.
func (f *Fake) OpenContext(i int) (Context, error) {
	if _, err := f.DeviceName(i); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.open, f.live, f.used = true, map[uintptr]int64{}, f.OthersBytes+f.ContextBytes
	return f, nil
}

func (f *Fake) round(n int64) int64 {
	g := max(f.Granularity, 1)
	return (n + g - 1) / g * g
}

// MemInfo implements Context.
func (f *Fake) MemInfo() (int64, int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.Total - f.used, f.Total, nil
}

// Alloc implements Context.
func (f *Fake) Alloc(n int64) (uintptr, error) {
	f.mu.Lock()
	f.allocs++
	k := f.allocs
	hook := f.Hook
	f.mu.Unlock()
	if hook != nil {
		hook(k)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.round(n)
	if (f.FailAfter > 0 && k >= f.FailAfter) || f.used+r > f.Total {
		return 0, fmt.Errorf("cuMemAlloc(%d): %w", n, ErrOutOfMemory)
	}
	f.next += 1 << 21
	f.live[f.next] = r
	f.used += r
	return f.next, nil
}

// Free implements Context.
func (f *Fake) Free(p uintptr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.live[p]
	if !ok {
		return fmt.Errorf("free of unknown pointer %#x", p)
	}
	delete(f.live, p)
	f.used -= n
	return nil
}

// Close implements Context.
func (f *Fake) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.open = false
	return nil
}
