package measured

import (
	"regexp"
	"testing"
)

// TestProvenance checks that every measured size says where it was
// measured.
func TestProvenance(t *testing.T) {
	date := regexp.MustCompile(`^20\d\d-\d\d(-\d\d)?$`)
	for name, b := range All() {
		t.Run(name, func(t *testing.T) {
			on := b.On
			if b.Bytes <= 0 || b.How == "" {
				t.Errorf("%s = %d bytes, how %q", name, b.Bytes, b.How)
			}
			if !date.MatchString(on.Date) || on.Device == "" || on.Driver == "" || on.CUDA == "" || on.Source == "" {
				t.Errorf("%s measured on %+v: date, device, driver, CUDA and source are required", name, on)
			}
		})
	}
}
