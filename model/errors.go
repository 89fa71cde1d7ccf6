package model

import (
	"errors"
	"fmt"
	"strings"
)

// Error is a problem with a spec, located at a line of its file. Every error
// that Parse returns about the content of a spec is an *Error or an ErrorList
// of them, so the CLI can tell bad input (exit code 2) from other failures.
type Error struct {
	File string
	Line int
	Msg  string
}

func (e *Error) Error() string {
	switch {
	case e.File != "" && e.Line > 0:
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	case e.File != "":
		return fmt.Sprintf("%s: %s", e.File, e.Msg)
	default:
		return e.Msg
	}
}

// ErrorList is several spec errors, reported together, in file order.
type ErrorList []*Error

func (l ErrorList) Error() string {
	s := make([]string, len(l))
	for i, e := range l {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// IsSpecError reports whether err (or an error it wraps) is about the
// content of a spec, as opposed to, say, a file that cannot be read.
func IsSpecError(err error) bool {
	var e *Error
	var l ErrorList
	return errors.As(err, &e) || errors.As(err, &l)
}

// unlocated returns err's spec errors without their line numbers.
func unlocated(err error) error {
	var e *Error
	var l ErrorList
	switch {
	case errors.As(err, &l):
		out := make(ErrorList, len(l))
		for i, x := range l {
			c := *x
			c.Line = 0
			out[i] = &c
		}
		return out
	case errors.As(err, &e):
		c := *e
		c.Line = 0
		return &c
	}
	return err
}

// errs collects errors while decoding one file.
type errs struct {
	file string
	list ErrorList
}

func (e *errs) add(line int, format string, args ...any) {
	e.list = append(e.list, &Error{File: e.file, Line: line, Msg: fmt.Sprintf(format, args...)})
}

func (e *errs) err() error {
	if len(e.list) == 0 {
		return nil
	}
	if len(e.list) == 1 {
		return e.list[0]
	}
	return e.list
}
