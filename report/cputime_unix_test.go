//go:build unix

package report

import "syscall"

// cpuTime is the process's user and system CPU time so far, in
// nanoseconds: on a machine shared with other work it measures the
// benchmark's own work, where wall time also counts the waits for a core.
func cpuTime() int64 {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		return 0
	}
	return u.Utime.Nano() + u.Stime.Nano()
}
