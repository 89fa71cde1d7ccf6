package diagnose

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// OOM is one torch.OutOfMemoryError message. Byte counts are as PyTorch
// printed them (two decimals of their unit, so within 0.5% ); a figure the
// message did not give is 0.
type OOM struct {
	// Line is the message's line in the log (1-based).
	Line int `json:"line"`
	// Rank is the rank from a "[rank1]:" or torchrun "[default1]:" prefix,
	// or -1.
	Rank int `json:"rank"`
	// Format is "current" (torch ≥ 2.1: "GPU 0 has a total capacity of …")
	// or "legacy" ("(GPU 0; … total capacity; … already allocated; …)").
	Format string `json:"format"`
	GPU    int    `json:"gpu"`
	// Request is the allocation that failed, as the allocator rounded it.
	Request int64 `json:"request_bytes"`
	// Total is the device's capacity and Free what the driver had free.
	Total int64 `json:"device_total_bytes"`
	Free  int64 `json:"device_free_bytes"`
	// InUse is what this process had in use on the device, its CUDA
	// context and libraries included (current format only).
	InUse int64 `json:"process_in_use_bytes,omitempty"`
	// Others is what the other processes the driver listed had in use.
	Others int64 `json:"other_processes_bytes,omitempty"`
	// Allowed is the cap from torch.cuda.set_per_process_memory_fraction.
	Allowed int64 `json:"allowed_bytes,omitempty"`
	// Allocated is what PyTorch had allocated, and Reserved what its
	// caching allocator held (allocated included).
	Allocated int64 `json:"allocated_bytes"`
	Reserved  int64 `json:"reserved_bytes"`
}

const sz = `([0-9]+(?:\.[0-9]+)? (?:bytes|B|KiB|MiB|GiB|TiB))`

var (
	rankPrefix = lazyRegexp(`^\[(?:rank|default)(\d+)\]:`)
	current    = lazyRegexp(`Tried to allocate ` + sz + `\. GPU (\d+) has a total capac(?:i)?ty of ` + sz +
		` of which ` + sz + ` is free\.(.*?)Of the allocated memory ` + sz + ` is allocated by PyTorch, ` +
		`(?:with ` + sz + ` allocated in private pools \(e\.g\., CUDA Graphs\), )?and ` + sz + ` is reserved by PyTorch but unallocated`)
	legacy = lazyRegexp(`Tried to allocate ` + sz + ` \(GPU (\d+); ` + sz + ` total capacity; ` + sz +
		` already allocated; ` + sz + ` free; (?:` + sz + ` allowed; )?` + sz + ` reserved in total by PyTorch\)`)
	inUse   = lazyRegexp(`this process has ` + sz + ` memory in use`)
	other   = lazyRegexp(`Process (\d+) has ` + sz + ` memory in use`)
	allowed = lazyRegexp(sz + ` allowed;`)
)

// errNoMessage is returned when a log holds no message diagnose can read.
var errNoMessage = errors.New("no torch.OutOfMemoryError message (\"CUDA out of memory. Tried to allocate …\") found")

// ParseLog finds every out-of-memory message in a log. A message repeated
// for the same rank (a traceback printed twice) is kept once.
func ParseLog(data []byte) ([]OOM, error) {
	var out []OOM
	seen := map[string]bool{}
	for i, line := range bytes.Split(data, []byte("\n")) {
		if !bytes.Contains(line, []byte("Tried to allocate")) {
			continue
		}
		s := strings.TrimRight(string(line), "\r")
		rank := -1
		if m := rankPrefix().FindStringSubmatch(s); m != nil {
			rank, _ = strconv.Atoi(m[1])
		}
		o, err := parseMessage(s)
		if err != nil {
			return nil, &InputError{Line: i + 1, Err: err}
		}
		o.Line, o.Rank = i+1, rank
		key := fmt.Sprint(rank, s[strings.Index(s, "Tried"):])
		if !seen[key] {
			seen[key] = true
			out = append(out, o)
		}
	}
	if len(out) == 0 {
		return nil, errNoMessage
	}
	return out, nil
}

func parseMessage(s string) (OOM, error) {
	if m := current().FindStringSubmatch(s); m != nil {
		o := OOM{Format: "current"}
		o.GPU, _ = strconv.Atoi(m[2])
		o.Request, o.Total, o.Free = size(m[1]), size(m[3]), size(m[4])
		mid := m[5]
		if x := inUse().FindStringSubmatch(mid); x != nil {
			o.InUse = size(x[1])
		}
		for _, x := range other().FindAllStringSubmatch(mid, -1) {
			o.Others += size(x[2])
		}
		if x := allowed().FindStringSubmatch(mid); x != nil {
			o.Allowed = size(x[1])
		}
		o.Allocated = size(m[6]) + size(m[7])
		o.Reserved = o.Allocated + size(m[8])
		return o, o.check()
	}
	if m := legacy().FindStringSubmatch(s); m != nil {
		o := OOM{Format: "legacy"}
		o.GPU, _ = strconv.Atoi(m[2])
		o.Request, o.Total, o.Allocated, o.Free = size(m[1]), size(m[3]), size(m[4]), size(m[5])
		o.Allowed, o.Reserved = size(m[6]), size(m[7])
		return o, o.check()
	}
	return OOM{}, errors.New("an out-of-memory message in a format diagnose does not know (or cut short)")
}

func (o OOM) check() error {
	for _, v := range []int64{o.Request, o.Total, o.Free, o.InUse, o.Others, o.Allowed, o.Allocated, o.Reserved} {
		if v < 0 {
			return errors.New("a size out of range in the out-of-memory message")
		}
	}
	return nil
}

// size reads a size as PyTorch's format_size prints it ("1.50 GiB",
// "512 bytes"); a value it cannot hold is -1.
func size(s string) int64 {
	if s == "" {
		return 0
	}
	num, unit, _ := strings.Cut(s, " ")
	v, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return -1
	}
	mult := map[string]float64{"bytes": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}[unit]
	f := math.Round(v * mult)
	if f > math.MaxInt64/2 || f < 0 {
		return -1
	}
	return int64(f)
}

// lazyRegexp compiles expr on first use: diagnose's patterns are linked into
// every memplan command, and compiling them at start-up would cost each
// `memplan estimate` about a millisecond (docs/performance.md).
func lazyRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}
