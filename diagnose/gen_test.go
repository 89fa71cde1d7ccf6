package diagnose

import (
	"os"
	"testing"
)

// TestWriteBigSnapshot writes the generated 100 MB snapshot to
// $MEMPLAN_BIG_SNAPSHOT, to time memplan diagnose on it.
func TestWriteBigSnapshot(t *testing.T) {
	p := os.Getenv("MEMPLAN_BIG_SNAPSHOT")
	if p == "" {
		t.Skip("MEMPLAN_BIG_SNAPSHOT not set")
	}
	if err := os.WriteFile(p, bigSnapshot(210_000), 0o644); err != nil {
		t.Fatal(err)
	}
}
