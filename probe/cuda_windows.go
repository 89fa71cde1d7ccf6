//go:build !cu && windows

package probe

import (
	"fmt"
	"path/filepath"
	"syscall"
	"unsafe"
)

// libcuda is the driver library on Windows: the NVIDIA driver installs it
// in the system directory.
const libcuda = "nvcuda.dll"

// openLib loads nvcuda.dll by its absolute path in the Windows system
// directory, so that no other directory on the DLL search path can supply
// it, and returns its symbol lookup.
func openLib() (func(name string) (uintptr, error), error) {
	dir, err := systemDir()
	if err != nil {
		return nil, err
	}
	dll, err := syscall.LoadDLL(filepath.Join(dir, libcuda))
	if err != nil {
		return nil, err
	}
	return func(name string) (uintptr, error) {
		p, err := dll.FindProc(name)
		if err != nil {
			return 0, err
		}
		return p.Addr(), nil
	}, nil
}

// systemDir is GetSystemDirectoryW (C:\Windows\System32).
func systemDir() (string, error) {
	proc := syscall.NewLazyDLL("kernel32.dll").NewProc("GetSystemDirectoryW")
	buf := make([]uint16, syscall.MAX_PATH)
	n, _, err := proc.Call(uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
	if n == 0 || int(n) > len(buf) {
		return "", fmt.Errorf("GetSystemDirectoryW: %v", err)
	}
	return syscall.UTF16ToString(buf[:n]), nil
}
