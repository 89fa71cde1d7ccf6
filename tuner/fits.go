package tuner

// Verdict says how a device total sits against a device and a target band.
type Verdict int

// The verdicts, from best to worst.
const (
	// FitsTarget: at or below the band's upper edge less the safety margin.
	FitsTarget Verdict = iota
	// AboveTarget: fits the device, but above that edge.
	AboveTarget
	// NoFit: more than the device's memory.
	NoFit
)

// String names a verdict as check and the JSON output print it.
func (v Verdict) String() string {
	switch v {
	case FitsTarget:
		return "fits"
	case AboveTarget:
		return "above-target"
	default:
		return "does-not-fit"
	}
}

// Fits is the one rule for "fits" (docs/tuner.md): a device total fits a
// target when it is at or below Limit(band, margin) of the device's memory,
// the same edge Tune searches under. estimate's output, check, tune, the
// report and the fixes all decide with it.
func Fits(total, memory int64, band Band, margin float64) Verdict {
	switch {
	case total > memory:
		return NoFit
	case total > limitBytes(band, margin, memory):
		return AboveTarget
	default:
		return FitsTarget
	}
}

// limitBytes is the search's edge in bytes.
func limitBytes(band Band, margin float64, memory int64) int64 {
	return int64(Limit(band, Constraints{Margin: margin}) * float64(memory))
}
