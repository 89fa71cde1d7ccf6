package units

import (
	"errors"
	"testing"
)

func TestParseBytes(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		decimal bool
		err     bool
	}{
		{"80GiB", 80 * GiB, false, false},
		{"80 GiB", 80 * GiB, false, false},
		{"80GB", 80_000_000_000, true, false},
		{"1.5GiB", 3 * GiB / 2, false, false},
		{"512", 512, false, false},
		{"40MiB", 40 * MiB, false, false},
		{"16Gi", 16 * GiB, false, false},
		{"0GiB", 0, false, true},
		{"GiB", 0, false, true},
		{"12XB", 0, false, true},
		{"99999999999TiB", 0, false, true},
		{"", 0, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseBytes(tt.in)
			if (err != nil) != tt.err {
				t.Fatalf("ParseBytes(%q) error = %v, want error %v", tt.in, err, tt.err)
			}
			if err != nil {
				return
			}
			if got.Bytes != tt.want || got.Decimal != tt.decimal {
				t.Errorf("ParseBytes(%q) = %+v, want {%d %v}", tt.in, got, tt.want, tt.decimal)
			}
		})
	}
	if _, err := ParseBytes("99999999999TiB"); !errors.Is(err, ErrOverflow) {
		t.Errorf("overflow error = %v, want ErrOverflow", err)
	}
}

func TestCommonScale(t *testing.T) {
	s := CommonScale(512, 3*MiB, 2*GiB)
	if s.Name != "GiB" {
		t.Fatalf("CommonScale = %s, want GiB", s.Name)
	}
	if got, want := s.In(GiB/2), "0.50 GiB"; got != want {
		t.Errorf("In = %q, want %q", got, want)
	}
}

func TestMulCheck(t *testing.T) {
	if _, err := MulCheck(1<<40, 1<<30); !errors.Is(err, ErrOverflow) {
		t.Errorf("MulCheck overflow err = %v", err)
	}
	if v, err := MulCheck(3, 4, 5); err != nil || v != 60 {
		t.Errorf("MulCheck(3,4,5) = %d, %v", v, err)
	}
}
