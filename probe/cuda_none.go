//go:build !cu && !linux && !windows

package probe

import "runtime"

// libcuda names the (missing) driver library in errors.
const libcuda = "none"

// Open reports that this operating system has no CUDA driver: NVIDIA ships
// none for macOS. It returns a *NoCUDAError.
func Open() (Driver, error) {
	return nil, &NoCUDAError{OS: osName(runtime.GOOS)}
}
