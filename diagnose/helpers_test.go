package diagnose

import "errors"

func asInput(err error, ie **InputError) bool { return errors.As(err, ie) }
