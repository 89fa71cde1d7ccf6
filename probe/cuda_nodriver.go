//go:build !cu && linux && nodriver

package probe

// libcuda names the driver library this build does not load, in errors.
const libcuda = "libcuda.so.1"

// Open reports that this binary was built without the driver loader
// (-tags nodriver): a fully static binary, for containers without the C
// library that loading libcuda.so.1 needs (docs/probe.md). It returns a
// *NoLoaderError.
func Open() (Driver, error) {
	return nil, &NoLoaderError{}
}
