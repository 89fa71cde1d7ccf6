// Package shellquote quotes command-line words for a POSIX shell, so that
// the commands memplan prints (tune's and report's suggested memplan plan
// command) can be pasted as they are.
package shellquote

import "strings"

// safe are the bytes a word may hold and still be given to a shell as it
// is.
const safe = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%+=:,./-_"

// Quote returns s as one shell word: s itself when every byte is safe,
// else s in single quotes, each single quote in it closing the quoted
// text, written escaped, and opening it again (four bytes: quote,
// backslash, quote, quote).
func Quote(s string) string {
	if s != "" && strings.Trim(s, safe) == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
