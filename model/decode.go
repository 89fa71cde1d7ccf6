package model

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// mapping reads one YAML mapping, remembering which keys were read so that
// the rest can be reported as unknown (a typo such as hiden_size).
type mapping struct {
	e     *errs
	what  string
	line  int
	vals  map[string]*yaml.Node
	keys  map[string]int
	order []string
	known map[string]bool
}

func newMapping(e *errs, n *yaml.Node, what string) *mapping {
	m := &mapping{e: e, what: what, line: n.Line, vals: map[string]*yaml.Node{}, keys: map[string]int{}, known: map[string]bool{}}
	if n.Kind != yaml.MappingNode {
		e.add(n.Line, "%s must be a mapping of fields, got %s", what, describe(n))
		return m
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if _, dup := m.vals[k.Value]; dup {
			e.add(k.Line, "%s: field %q appears twice", what, k.Value)
			continue
		}
		m.vals[k.Value], m.keys[k.Value] = v, k.Line
		m.order = append(m.order, k.Value)
	}
	return m
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "an alias"
}

func (m *mapping) get(key string) *yaml.Node {
	m.known[key] = true
	return m.vals[key]
}

func (m *mapping) has(key string) bool { m.known[key] = true; _, ok := m.vals[key]; return ok }

func (m *mapping) scalar(key string) (*yaml.Node, bool) {
	v := m.get(key)
	if v == nil {
		return nil, false
	}
	if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
		m.e.add(v.Line, "%s: want a value, got %s", key, describe(v))
		return nil, false
	}
	return v, true
}

// int reads a positive integer; required fields that are missing are
// reported. Underscores are allowed as digit separators (50_257).
func (m *mapping) int(key string, dst *int64, required bool) {
	v, ok := m.scalar(key)
	if !ok {
		if required && m.vals[key] == nil {
			m.e.add(m.line, "%s: missing required field %q", m.what, key)
		}
		return
	}
	s := strings.ReplaceAll(v.Value, "_", "")
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			m.e.add(v.Line, "%s: %s overflows a 64-bit integer", key, v.Value)
			return
		}
		if f, ferr := strconv.ParseFloat(s, 64); ferr == nil && f == math.Trunc(f) && math.Abs(f) < 1<<62 {
			n = int64(f)
		} else {
			m.e.add(v.Line, "%s: want a whole number, got %q", key, v.Value)
			return
		}
	}
	if n <= 0 {
		m.e.add(v.Line, "%s: must be positive, got %d", key, n)
		return
	}
	*dst = n
}

func (m *mapping) float(key string, dst *float64, lo, hi float64) {
	v, ok := m.scalar(key)
	if !ok {
		return
	}
	f, err := strconv.ParseFloat(v.Value, 64)
	if err != nil || math.IsNaN(f) {
		m.e.add(v.Line, "%s: want a number, got %q", key, v.Value)
		return
	}
	if f < lo || f > hi {
		m.e.add(v.Line, "%s: must be between %g and %g, got %g", key, lo, hi, f)
		return
	}
	*dst = f
}

func (m *mapping) bool(key string, dst *bool) {
	v, ok := m.scalar(key)
	if !ok {
		return
	}
	switch strings.ToLower(v.Value) {
	case "true", "yes", "on":
		*dst = true
	case "false", "no", "off":
		*dst = false
	default:
		m.e.add(v.Line, "%s: want true or false, got %q", key, v.Value)
	}
}

func (m *mapping) str(key string, dst *string) (line int, ok bool) {
	v, ok := m.scalar(key)
	if !ok {
		return 0, false
	}
	*dst = v.Value
	return v.Line, true
}

// finish reports every key that was never read.
func (m *mapping) finish() {
	for _, k := range m.order {
		if m.known[k] {
			continue
		}
		var valid []string
		for k := range m.known {
			valid = append(valid, k)
		}
		msg := fmt.Sprintf("%s: unknown field %q", m.what, k)
		if s := suggest(k, valid); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		} else if len(valid) > 0 {
			sort.Strings(valid)
			msg += " (valid: " + strings.Join(valid, ", ") + ")"
		}
		m.e.add(m.keys[k], "%s", msg)
	}
}

// suggest returns the closest of valid to s, if it is close enough to be a
// typo.
func suggest(s string, valid []string) string {
	best, bestD := "", 3
	for _, v := range valid {
		if d := editDistance(strings.ToLower(s), v); d < bestD || (d == bestD && v < best) {
			best, bestD = v, d
		}
	}
	if bestD > 2 && !strings.Contains(s, best) {
		return ""
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError turns a yaml.v3 error into file:line form.
func syntaxError(file string, err error) error {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &Error{File: file, Line: line, Msg: "YAML syntax: " + m[2]}
	}
	if te, ok := err.(*yaml.TypeError); ok {
		msg = strings.Join(te.Errors, "; ")
	}
	return &Error{File: file, Msg: "YAML syntax: " + strings.TrimPrefix(msg, "yaml: ")}
}
