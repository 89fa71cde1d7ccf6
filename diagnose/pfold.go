package diagnose

import "errors"

// The decoder's list and dict operations, and the folding of a snapshot's
// frames, stacks and trace entries into traceTables as they are filled.

// update stores a changed top value back in the memo when it is kept there.
func (d *decoder) update(top *pval) {
	if top.shared {
		d.memo[top.m] = *top
	}
}

func (d *decoder) appendOp(op byte) error {
	var items []pval
	if op == 'a' {
		v, err := d.pop()
		if err != nil {
			return err
		}
		items = []pval{v}
	} else {
		m, err := d.popMark()
		if err != nil {
			return err
		}
		items = m
	}
	if len(d.stack) == 0 {
		return errors.New("malformed pickle (append to a non-list)")
	}
	top := &d.stack[len(d.stack)-1]
	switch top.kind {
	case pList:
		if (top.l == nil || len(*top.l) == 0) && !d.seen(top) {
			if d.compactList(top, items) {
				d.update(top)
				return nil
			}
		}
	case pStack, pEvents:
		ok, err := d.extendCompact(top, items)
		if err != nil {
			return err
		}
		if ok {
			d.update(top)
			return nil
		}
	default:
		return errors.New("malformed pickle (append to a non-list)")
	}
	if top.l == nil {
		top.l = new([]pval)
	}
	if *top.l == nil {
		*top.l = make([]pval, 0, len(items))
	}
	*top.l = append(*top.l, items...)
	d.update(top)
	return nil
}

// compactList turns an empty list filled with frames into a stack, or
// filled with trace entries into a list of events.
func (d *decoder) compactList(top *pval, items []pval) bool {
	if ids, ok := d.frameIDs(items); ok {
		top.kind, top.i, top.l = pStack, int64(d.t.stack(ids)), nil
		return true
	}
	if ix, ok := eventIDs(items, nil); ok {
		top.kind, top.l, top.ix = pEvents, nil, &ix
		return true
	}
	return false
}

// extendCompact appends to a stack or a list of events; items of another
// kind turn it back into a list (false, with top.l holding what it had).
// Either changes the value itself (all but extending a list of events,
// whose ids are behind a pointer): when copies of it were read from the
// memo, it gives errSubset, for gopickle to decode.
func (d *decoder) extendCompact(top *pval, items []pval) (bool, error) {
	if top.kind == pEvents {
		if ix, ok := eventIDs(items, *top.ix); ok {
			*top.ix = ix
			return true, nil
		}
	}
	if d.seen(top) {
		return false, errSubset
	}
	if top.kind == pStack {
		if ids, ok := d.frameIDs(items); ok {
			all := append(append([]int32(nil), d.t.stackFrames(int32(top.i))...), ids...)
			top.i = int64(d.t.stack(all))
			return true, nil
		}
		var l []pval
		for _, id := range d.t.stackFrames(int32(top.i)) {
			l = append(l, pval{kind: pFrame, i: int64(id)})
		}
		top.kind, top.l = pList, &l
		return false, nil
	}
	l := make([]pval, 0, len(*top.ix)+len(items))
	for _, id := range *top.ix {
		l = append(l, pval{kind: pEvent, i: int64(id)})
	}
	top.kind, top.l, top.ix = pList, &l, nil
	return false, nil
}

func (d *decoder) frameIDs(items []pval) ([]int32, bool) {
	d.ids = d.ids[:0]
	for _, it := range items {
		if it.kind != pFrame {
			return nil, false
		}
		d.ids = append(d.ids, int32(it.i))
	}
	return d.ids, len(items) > 0
}

func eventIDs(items []pval, to []int32) ([]int32, bool) {
	if len(items) == 0 {
		return nil, false
	}
	for _, it := range items {
		if it.kind != pEvent {
			return nil, false
		}
	}
	if to == nil {
		to = make([]int32, 0, len(items))
	}
	for _, it := range items {
		to = append(to, int32(it.i))
	}
	return to, true
}

func (d *decoder) setItemsOp(op byte) error {
	var items []pval
	if op == 's' {
		if len(d.stack) < 2 {
			return errors.New("malformed pickle (stack underflow)")
		}
		items = d.stack[len(d.stack)-2:]
		d.stack = d.stack[:len(d.stack)-2]
		if items[0].kind == pMark || items[1].kind == pMark {
			return errors.New("malformed pickle (MARK in SETITEM)")
		}
	} else {
		m, err := d.popMark()
		if err != nil {
			return err
		}
		items = m
	}
	if len(items)%2 != 0 || len(d.stack) == 0 {
		return errors.New("malformed pickle (setitems on a non-dict)")
	}
	top := &d.stack[len(d.stack)-1]
	switch top.kind {
	case pEvent:
		if !d.t.foldEvent(&d.t.events[top.i], items) {
			return errSubset
		}
		return nil
	case pFrame: // more keys than a frame's: a dict after all
		return errSubset
	case pDict:
	default:
		return errors.New("malformed pickle (setitems on a non-dict)")
	}
	if (top.d == nil || len(*top.d) == 0) && !d.seen(top) {
		if d.compactDict(top, items) {
			d.update(top)
			return nil
		}
	}
	if top.d == nil {
		top.d = new([]pval)
	}
	if *top.d == nil {
		*top.d = make([]pval, 0, len(items))
	}
	*top.d = append(*top.d, items...)
	d.update(top)
	return nil
}

// compactDict folds an empty dict filled with a frame's keys, or a trace
// entry's, into an id in the tables.
func (d *decoder) compactDict(top *pval, items []pval) bool {
	if f, ok := asFrame(items); ok {
		top.kind, top.i, top.d = pFrame, int64(d.t.frame(f)), nil
		return true
	}
	if hasAction(items) {
		e := event{stack: -1}
		if d.t.foldEvent(&e, items) {
			top.kind, top.i, top.d = pEvent, int64(len(d.t.events)), nil
			d.t.events = append(d.t.events, e)
			return true
		}
	}
	return false
}

// asFrame reads a dict's items (key, value, …) as a Python frame: exactly
// the keys "name", "filename" (strings) and "line" (an integer).
func asFrame(items []pval) (pframe, bool) {
	var f pframe
	if len(items) != 6 {
		return f, false
	}
	seen := 0
	for k := 0; k < 6; k += 2 {
		key, v := items[k], items[k+1]
		switch {
		case key.kind != pStr:
			return f, false
		case key.s == "name" && v.kind == pStr:
			f.name, seen = v.s, seen|1
		case key.s == "filename" && v.kind == pStr:
			f.file, seen = v.s, seen|2
		case key.s == "line" && v.kind == pInt:
			f.line, seen = v.i, seen|4
		default:
			return f, false
		}
	}
	return f, seen == 7
}
