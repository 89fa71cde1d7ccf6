//go:build !unix

package diagnose

import (
	"errors"
	"os"
)

// mapFile is not available here: the file is read instead.
func mapFile(*os.File, int64) ([]byte, func(), error) { return nil, nil, errors.ErrUnsupported }
