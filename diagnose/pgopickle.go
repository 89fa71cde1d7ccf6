package diagnose

import (
	"math"
	"math/big"

	"github.com/nlpodyssey/gopickle/types"
)

// fromGo converts what gopickle decoded into a pval (the fallback path).
// A container reached twice (the memo shares it, or it holds itself) is
// converted once and shared, as in the pickle: converting it at each
// reference would take time exponential in the sharing (the fuzzer found
// a file of 98 KB that never finished). A snapshot nests a few levels deep;
// values deeper than 32 are left out.
func fromGo(v any) pval { return goConv{}.conv(v, 0) }

// goConv is a conversion's containers already converted, by identity.
type goConv map[any]pval

func (c goConv) conv(v any, depth int) pval {
	if depth > 32 {
		return pval{kind: pOther}
	}
	switch v.(type) {
	case *types.List, *types.Tuple, *types.Dict: // pointers: by identity
		if pv, ok := c[v]; ok {
			return pv
		}
	}
	switch x := v.(type) {
	case nil:
		return pval{kind: pNone}
	case bool:
		if x {
			return pval{kind: pBool, i: 1}
		}
		return pval{kind: pBool}
	case int:
		return pval{kind: pInt, i: int64(x)}
	case int64:
		return pval{kind: pInt, i: x}
	case *big.Int:
		if x.IsInt64() {
			return pval{kind: pInt, i: x.Int64()}
		}
	case float64:
		return pval{kind: pFloat, i: int64(math.Float64bits(x))}
	case string:
		return pval{kind: pStr, s: x}
	case *types.List:
		return c.list(v, *x, depth)
	case *types.Tuple:
		return c.list(v, *x, depth)
	case *types.Dict:
		d := make([]pval, 2*len(*x))
		pv := pval{kind: pDict, d: &d}
		c[v] = pv
		for i, e := range *x {
			d[2*i], d[2*i+1] = c.conv(e.Key, depth+1), c.conv(e.Value, depth+1)
		}
		return pv
	}
	return pval{kind: pOther}
}

func (c goConv) list(v any, xs []any, depth int) pval {
	l := make([]pval, len(xs))
	pv := pval{kind: pList, l: &l}
	c[v] = pv
	for i, x := range xs {
		l[i] = c.conv(x, depth+1)
	}
	return pv
}
