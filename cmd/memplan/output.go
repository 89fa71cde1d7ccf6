package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
)

// Output helpers shared by the commands. Each command renders its own
// text in its file; --format json goes through writeJSON, so that the
// human and machine forms show the same struct.

// writeJSON writes v as indented JSON, the form every --format json uses.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// commas prints 124439808 as 124,439,808.
func commas(n int64) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// isTerminal says whether f is a terminal (progress lines are printed only
// there).
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
