//go:build !cu && linux && !nodriver

package probe

import "github.com/ebitengine/purego"

// libcuda is the driver library on Linux.
const libcuda = "libcuda.so.1"

// openLib loads libcuda.so.1 with dlopen (through purego, no cgo) and
// returns its symbol lookup. The error carries dlerror's text.
func openLib() (func(name string) (uintptr, error), error) {
	h, err := purego.Dlopen(libcuda, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, err
	}
	return func(name string) (uintptr, error) { return purego.Dlsym(h, name) }, nil
}
