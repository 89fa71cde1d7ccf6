// Package units parses and prints byte sizes.
//
// memplan keeps every byte count as an int64 and shows people binary units
// (KiB, MiB, GiB). GPU memory is commonly quoted as "80GB", which is ambiguous:
// ParseBytes accepts decimal units but reports that it did so, so callers can
// tell the user which number was meant.
package units

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// Binary and decimal unit sizes in bytes.
const (
	KiB int64 = 1 << 10
	MiB int64 = 1 << 20
	GiB int64 = 1 << 30
	TiB int64 = 1 << 40
)

var binaryUnits = map[string]int64{
	"b": 1, "": 1,
	"kib": KiB, "mib": MiB, "gib": GiB, "tib": TiB,
	"ki": KiB, "mi": MiB, "gi": GiB, "ti": TiB,
}

var decimalUnits = map[string]int64{
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
	"k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12,
}

// ErrOverflow is returned (wrapped) when a size does not fit in an int64.
var ErrOverflow = errors.New("size overflows int64")

// Parsed is the result of ParseBytes.
type Parsed struct {
	Bytes int64
	// Decimal is true when the input used a decimal (SI) unit such as "GB",
	// so that the caller can say which number it was taken as.
	Decimal bool
}

// ParseBytes parses a size such as "80GiB", "1.5 GiB", "80GB", "512" or
// "40 MiB". Binary units (KiB, MiB, GiB, TiB) are powers of 1024; decimal
// units (KB, MB, GB, TB) are powers of 1000. A bare number is bytes.
func ParseBytes(s string) (Parsed, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return Parsed{}, errors.New("empty size")
	}
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.' || t[i] == '_') {
		i++
	}
	num, unit := strings.ReplaceAll(t[:i], "_", ""), strings.ToLower(strings.TrimSpace(t[i:]))
	if num == "" {
		return Parsed{}, fmt.Errorf("size %q: missing number", s)
	}
	mult, dec := binaryUnits[unit], false
	if mult == 0 {
		if m, ok := decimalUnits[unit]; ok {
			mult, dec = m, true
		} else {
			return Parsed{}, fmt.Errorf("size %q: unknown unit %q (use B, KiB, MiB, GiB, TiB, or KB, MB, GB, TB)", s, t[i:])
		}
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return Parsed{}, fmt.Errorf("size %q: bad number %q", s, num)
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	q := new(big.Int).Quo(r.Num(), r.Denom())
	if !q.IsInt64() {
		return Parsed{}, fmt.Errorf("size %q: %w", s, ErrOverflow)
	}
	if q.Sign() <= 0 {
		return Parsed{}, fmt.Errorf("size %q must be positive", s)
	}
	return Parsed{Bytes: q.Int64(), Decimal: dec}, nil
}

// Scale is a binary unit used to print a column of byte counts.
type Scale struct {
	Name string
	Size int64
}

var scales = []Scale{{"B", 1}, {"KiB", KiB}, {"MiB", MiB}, {"GiB", GiB}, {"TiB", TiB}}

// ScaleFor returns the largest binary unit in which v is at least 1.
func ScaleFor(v int64) Scale {
	if v < 0 {
		v = -v
	}
	s := scales[0]
	for _, c := range scales {
		if v >= c.Size {
			s = c
		}
	}
	return s
}

// CommonScale returns one unit for a whole column: the unit that suits the
// largest value, so that every row of the column can be compared at a glance.
func CommonScale(vals ...int64) Scale {
	var m int64
	for _, v := range vals {
		if v < 0 {
			v = -v
		}
		if v > m {
			m = v
		}
	}
	return ScaleFor(m)
}

// In formats v in scale s with two decimals ("12.34 GiB"); bytes print whole.
func (s Scale) In(v int64) string {
	if s.Size == 1 {
		return strconv.FormatInt(v, 10) + " B"
	}
	return strconv.FormatFloat(float64(v)/float64(s.Size), 'f', 2, 64) + " " + s.Name
}

// Format prints v in the unit that suits it ("1.50 GiB").
func Format(v int64) string { return ScaleFor(v).In(v) }

// MulCheck multiplies non-negative factors and reports overflow instead of
// wrapping around.
func MulCheck(fs ...int64) (int64, error) {
	p := int64(1)
	for _, f := range fs {
		if f < 0 {
			return 0, fmt.Errorf("negative factor %d", f)
		}
		if f != 0 && p > math.MaxInt64/f {
			return 0, ErrOverflow
		}
		p *= f
	}
	return p, nil
}

// GiB2 prints v in GiB with two decimals, for columns of device sizes.
func GiB2(v int64) string { return Scale{"GiB", GiB}.In(v) }
