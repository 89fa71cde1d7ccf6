package diagnose

import (
	"os"
	"testing"
)

// torchEntries is the trace length that makes torchSnapshot about 100 MB.
const torchEntries = 820_000

// TestWriteBigSnapshot writes a 100 MB snapshot to $MEMPLAN_BIG_SNAPSHOT,
// to time memplan diagnose on it: torchSnapshot's, shaped as torch dumps
// one, or with MEMPLAN_BIG_SNAPSHOT_KIND=flat bigSnapshot's (every frame a
// dict of its own).
func TestWriteBigSnapshot(t *testing.T) {
	p := os.Getenv("MEMPLAN_BIG_SNAPSHOT")
	if p == "" {
		t.Skip("MEMPLAN_BIG_SNAPSHOT not set")
	}
	data := torchSnapshot(torchEntries)
	if os.Getenv("MEMPLAN_BIG_SNAPSHOT_KIND") == "flat" {
		data = bigSnapshot(210_000)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
