package model

import (
	"strings"
	"testing"
)

// TestDeviceAliases: every other name memplan devices lists finds its
// catalog device, in any case, and names no device twice over.
func TestDeviceAliases(t *testing.T) {
	as := DeviceAliases()
	if len(as) == 0 {
		t.Fatal("no aliases")
	}
	for i, a := range as {
		if i > 0 && as[i-1][0] >= a[0] {
			t.Errorf("aliases not sorted: %q before %q", as[i-1][0], a[0])
		}
		if _, ok := catalog[a[0]]; ok {
			t.Errorf("alias %q is itself a catalog name", a[0])
		}
		for _, name := range []string{a[0], " " + a[0] + " ", strings.ToUpper(a[0])} {
			d, ok := LookupDevice(name)
			if !ok || d.Name != a[1] {
				t.Errorf("LookupDevice(%q) = %q, %v; want %q", name, d.Name, ok, a[1])
			}
		}
	}
}
