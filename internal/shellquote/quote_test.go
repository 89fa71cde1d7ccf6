package shellquote

import (
	"os/exec"
	"testing"
)

func TestQuote(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"specs/llama-3-8b.yaml", "specs/llama-3-8b.yaml"},
		{"expandable_segments:True", "expandable_segments:True"},
		{"", "''"},
		{"my specs/a b.yaml", "'my specs/a b.yaml'"},
		{"it's", `'it'\''s'`},
		{"$HOME/x", "'$HOME/x'"},
		{"a?b*", "'a?b*'"},
		{"[256:1,>:8]", "'[256:1,>:8]'"},
	} {
		if got := Quote(c.in); got != c.want {
			t.Errorf("Quote(%q) = %s, want %s", c.in, got, c.want)
		}
	}
}

// FuzzQuote: a shell given the quoted word prints the word back unchanged.
func FuzzQuote(f *testing.F) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		f.Skip("no sh")
	}
	for _, s := range []string{"plain", "two words", "it's", `back\slash`, "$(x)", "`x`", "!x", "a\nb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for i := 0; i < len(s); i++ {
			if s[i] == 0 {
				return // no shell word can hold a NUL
			}
		}
		out, err := exec.Command(sh, "-c", "printf %s "+Quote(s)).Output()
		if err != nil {
			t.Fatalf("sh -c printf %%s %s: %v", Quote(s), err)
		}
		if string(out) != s {
			t.Errorf("sh printed %q for %s, want %q", out, Quote(s), s)
		}
	})
}
