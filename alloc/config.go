package alloc

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// Sizes of the caching allocator (c10/core/AllocatorConfig.h and
// c10/cuda/CUDACachingAllocator.cpp; docs/allocator.md §1).
const (
	MinBlock      = 512      // every request is rounded up to a multiple of 512 B
	SmallSize     = 1 << 20  // requests ≤ 1 MiB use the small pool
	SmallBuffer   = 2 << 20  // small-pool segment (and expandable page) size
	LargeBuffer   = 20 << 20 // default segment for 1 MiB < request < 10 MiB
	MinLargeAlloc = 10 << 20 // requests ≥ 10 MiB get a segment of their own
	RoundLarge    = 2 << 20  // ... rounded up to 2 MiB

	roundupIntervals = 16 // roundup_power2_divisions: one entry per power of two from 1 MiB
	maxRegThreads    = 128
	noLimit          = int64(1<<63 - 1)
)

// Config is a parsed PYTORCH_ALLOC_CONF (or PYTORCH_CUDA_ALLOC_CONF) value.
// The zero Config is PyTorch's default; use Default or Parse.
type Config struct {
	// Backend is "native" (the caching allocator) or "cudaMallocAsync".
	Backend string
	// MaxSplitSize is max_split_size_mb in bytes; 0 means unlimited.
	MaxSplitSize int64
	// MaxNonSplitRounding is max_non_split_rounding_mb in bytes; 0 means
	// the default, 20 MiB.
	MaxNonSplitRounding int64
	// RoundupDivisions holds roundup_power2_divisions per power-of-two
	// interval, from [1 MiB, 2 MiB) to [32 GiB, ∞); 0 or 1 rounds to 512 B.
	RoundupDivisions [roundupIntervals]int64
	// GCThreshold is garbage_collection_threshold, in (0, 1); 0 is off.
	GCThreshold float64
	// ExpandableSegments is expandable_segments:True.
	ExpandableSegments bool
	// LargeSegment is large_segment_size_mb in bytes; 0 means 20 MiB.
	LargeSegment int64

	// Settings that do not change device memory, kept so that a Config
	// prints back what was given.
	ReleaseLockOnMalloc        bool
	PinnedUseHostRegister      bool
	PinnedNumRegisterThreads   int64
	PinnedUseBackgroundThreads bool
	PinnedReserveSegmentMB     int64
	GraphCaptureRecordStream   bool

	// Source is the string Parse was given.
	Source string

	// SegmentOrder orders cached blocks of equal size that lie in
	// different segments (docs/allocator.md §8). It is not a
	// PYTORCH_ALLOC_CONF key: PyTorch orders by device address, and this
	// chooses how the simulation stands in for the address.
	SegmentOrder SegmentOrder
}

// SegmentOrder is how the simulation stands in for a segment's device
// address when it orders equal-size cached blocks.
type SegmentOrder uint8

const (
	// OrderAddress, the default, orders segments by the address the CUDA
	// driver would give them (address.go, docs/allocator.md §8).
	OrderAddress SegmentOrder = iota
	// OrderAge orders them by the time they were made, oldest first.
	OrderAge
)

// Default is PyTorch's default configuration.
func Default() Config { return Config{Backend: "native"} }

// IsDefault reports whether c simulates exactly like the default settings.
func (c Config) IsDefault() bool {
	for _, d := range c.RoundupDivisions {
		if d > 1 {
			return false
		}
	}
	return c.MaxSplitSize == 0 && c.nonSplit() == LargeBuffer && c.GCThreshold == 0 &&
		!c.ExpandableSegments && c.largeSegment() == LargeBuffer
}

func (c *Config) maxSplit() int64 {
	if c.MaxSplitSize == 0 {
		return noLimit
	}
	return c.MaxSplitSize
}

func (c *Config) nonSplit() int64 {
	if c.MaxNonSplitRounding == 0 {
		return LargeBuffer
	}
	return c.MaxNonSplitRounding
}

func (c *Config) largeSegment() int64 {
	if c.LargeSegment == 0 {
		return LargeBuffer
	}
	return c.LargeSegment
}

// ConfigError is a bad PYTORCH_ALLOC_CONF value; Key names the setting.
type ConfigError struct {
	Key string
	Msg string
}

func (e *ConfigError) Error() string {
	if e.Key == "" {
		return e.Msg
	}
	if e.Msg == "unknown key" {
		return fmt.Sprintf("unknown key %q", e.Key)
	}
	return fmt.Sprintf("%s: %s", e.Key, e.Msg)
}

// tokenize splits s as c10's ConfigTokenizer does: ',', ':', '[' and ']'
// are tokens of their own, whitespace is dropped.
func tokenize(s string) []string {
	var out []string
	var buf strings.Builder
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch == ',' || ch == ':' || ch == '[' || ch == ']':
			if buf.Len() > 0 {
				out = append(out, buf.String())
				buf.Reset()
			}
			out = append(out, string(ch))
		case ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f':
		default:
			buf.WriteByte(ch)
		}
	}
	if buf.Len() > 0 {
		out = append(out, buf.String())
	}
	return out
}

type parser struct {
	tok []string
	i   int
	key string
}

func (p *parser) errf(format string, a ...any) error {
	return &ConfigError{Key: p.key, Msg: fmt.Sprintf(format, a...)}
}

func (p *parser) next() (string, error) {
	p.i++
	if p.i >= len(p.tok) {
		return "", p.errf("missing value")
	}
	return p.tok[p.i], nil
}

func (p *parser) expect(t string) error {
	v, err := p.next()
	if err != nil {
		return err
	}
	if v != t {
		return p.errf("expected %q, got %q", t, v)
	}
	return nil
}

// value reads ":" and the value after it.
func (p *parser) value() (string, error) {
	if err := p.expect(":"); err != nil {
		return "", err
	}
	return p.next()
}

func (p *parser) boolValue() (bool, error) {
	v, err := p.value()
	if err != nil {
		return false, err
	}
	switch v {
	case "True":
		return true, nil
	case "False":
		return false, nil
	}
	return false, p.errf("expected True or False, got %q", v)
}

// uint parses an unsigned decimal (std::stoull, but memplan rejects a sign
// or trailing characters, which stoull would ignore or wrap).
func (p *parser) uint(v string) (int64, error) {
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, p.errf("%q is not an unsigned integer", v)
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, p.errf("%q is not an unsigned integer", v)
	}
	return n, nil
}

func (p *parser) uintValue() (int64, error) {
	v, err := p.value()
	if err != nil {
		return 0, err
	}
	return p.uint(v)
}

// mib parses a size in MiB with PyTorch's floor (at least 20 MiB) and
// clamps it so that the byte count cannot overflow.
func (p *parser) mib(min int64) (int64, error) {
	n, err := p.uintValue()
	if err != nil {
		return 0, err
	}
	if n < min {
		return 0, p.errf("%d is too small, must be >= %d", n, min)
	}
	return min64(n, noLimit>>20) << 20, nil
}

func min64(a, b int64) int64 {
	if a < b {
		return a
	}
	return b
}

func isPow2(n int64) bool { return n > 0 && n&(n-1) == 0 }

// Parse reads a PYTORCH_ALLOC_CONF value: comma-separated key:value pairs
// (docs/allocator.md §2). An unknown key or a bad value is a *ConfigError
// naming the key.
func Parse(s string) (Config, error) {
	c := Default()
	c.Source = s
	p := &parser{tok: tokenize(s), i: -1}
	for p.i+1 < len(p.tok) {
		p.i++
		p.key = p.tok[p.i]
		if err := p.setting(&c); err != nil {
			return Config{}, err
		}
		if p.i+1 < len(p.tok) {
			p.key = ""
			if err := p.expect(","); err != nil {
				return Config{}, err
			}
		}
	}
	return c, nil
}

func (p *parser) setting(c *Config) error {
	var err error
	switch p.key {
	case "backend":
		var v string
		if v, err = p.value(); err == nil {
			if v != "native" && v != "cudaMallocAsync" {
				return p.errf("unknown backend %q (native or cudaMallocAsync)", v)
			}
			c.Backend = v
		}
	case "max_split_size_mb":
		c.MaxSplitSize, err = p.mib(LargeBuffer >> 20)
	case "max_non_split_rounding_mb":
		c.MaxNonSplitRounding, err = p.mib(LargeBuffer >> 20)
	case "large_segment_size_mb":
		c.LargeSegment, err = p.mib(1)
	case "garbage_collection_threshold":
		err = p.gcThreshold(c)
	case "roundup_power2_divisions":
		err = p.roundup(c)
	case "expandable_segments":
		c.ExpandableSegments, err = p.boolValue()
	case "release_lock_on_cudamalloc", "release_lock_on_hipmalloc":
		c.ReleaseLockOnMalloc, err = p.boolValue()
	case "pinned_use_cuda_host_register", "pinned_use_hip_host_register":
		c.PinnedUseHostRegister, err = p.boolValue()
	case "pinned_use_background_threads":
		c.PinnedUseBackgroundThreads, err = p.boolValue()
	case "graph_capture_record_stream_reuse":
		c.GraphCaptureRecordStream, err = p.boolValue()
	case "pinned_num_register_threads":
		var n int64
		if n, err = p.uintValue(); err == nil {
			if !isPow2(n) || n > maxRegThreads {
				return p.errf("%d must be a power of 2 up to %d", n, maxRegThreads)
			}
			c.PinnedNumRegisterThreads = n
		}
	case "pinned_reserve_segment_size_mb":
		var n int64
		if n, err = p.uintValue(); err == nil {
			if n == 0 {
				return p.errf("must be greater than 0")
			}
			c.PinnedReserveSegmentMB = n
		}
	default:
		return &ConfigError{Key: p.key, Msg: "unknown key"}
	}
	return err
}

func (p *parser) gcThreshold(c *Config) error {
	v, err := p.value()
	if err != nil {
		return err
	}
	f, perr := strconv.ParseFloat(v, 64)
	if perr != nil || !(f > 0 && f < 1) {
		return p.errf("%q must be a number in (0.0, 1.0)", v)
	}
	c.GCThreshold = f
	return nil
}

// roundup parses roundup_power2_divisions: an integer (a power of two for
// every interval) or a list [MiB:divisions,...,>:divisions] as
// AcceleratorAllocatorConfig::parseRoundUpPower2Divisions does.
func (p *parser) roundup(c *Config) error {
	v, err := p.value()
	if err != nil {
		return err
	}
	c.RoundupDivisions = [roundupIntervals]int64{}
	if v != "[" {
		n, err := p.uint(v)
		if err != nil {
			return err
		}
		if !isPow2(n) {
			return p.errf("divisions %d must be a power of 2", n)
		}
		for i := range c.RoundupDivisions {
			c.RoundupDivisions[i] = n
		}
		return nil
	}
	first, last := true, 0
	for {
		k, err := p.next()
		if err != nil {
			return p.errf("missing ']'")
		}
		if k == "]" {
			return nil
		}
		n, err := p.uintValue()
		if err != nil {
			return err
		}
		if n != 0 && !isPow2(n) {
			return p.errf("divisions %d must be a power of 2 or 0", n)
		}
		if k == ">" {
			for i := last + 1; i < roundupIntervals; i++ {
				c.RoundupDivisions[i] = n
			}
		} else {
			b, err := p.uint(k)
			if err != nil {
				return err
			}
			if !isPow2(b) {
				return p.errf("interval %d MiB must be a power of 2", b)
			}
			idx := min(bits.Len64(uint64(b))-1, roundupIntervals-1)
			if first {
				for i := 0; i < idx; i++ {
					c.RoundupDivisions[i] = n
				}
				first = false
			}
			c.RoundupDivisions[idx] = n
			last = idx
		}
		if p.i+1 < len(p.tok) && p.tok[p.i+1] != "]" {
			if err := p.expect(","); err != nil {
				return err
			}
		}
	}
}

// String prints c in PYTORCH_ALLOC_CONF syntax, settings that differ from
// the default only.
func (c Config) String() string {
	var parts []string
	add := func(k, v string) { parts = append(parts, k+":"+v) }
	if c.Backend != "" && c.Backend != "native" {
		add("backend", c.Backend)
	}
	if c.ExpandableSegments {
		add("expandable_segments", "True")
	}
	if c.MaxSplitSize != 0 {
		add("max_split_size_mb", strconv.FormatInt(c.MaxSplitSize>>20, 10))
	}
	if c.MaxNonSplitRounding != 0 {
		add("max_non_split_rounding_mb", strconv.FormatInt(c.MaxNonSplitRounding>>20, 10))
	}
	if c.LargeSegment != 0 {
		add("large_segment_size_mb", strconv.FormatInt(c.LargeSegment>>20, 10))
	}
	if c.RoundupDivisions != [roundupIntervals]int64{} {
		var l []string
		for i, d := range c.RoundupDivisions {
			l = append(l, fmt.Sprintf("%d:%d", int64(1)<<i, d))
		}
		add("roundup_power2_divisions", "["+strings.Join(l, ",")+"]")
	}
	if c.GCThreshold != 0 {
		add("garbage_collection_threshold", strconv.FormatFloat(c.GCThreshold, 'g', -1, 64))
	}
	return strings.Join(parts, ",")
}
