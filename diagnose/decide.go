package diagnose

import (
	"fmt"
	"strings"

	"github.com/memplan/memplan/estimate"
)

// decide applies the rules in order (docs/diagnose.md, "Rules"): a leak
// explains the rest, other processes come before the job's own use, and
// fragmentation before pressure.
func decide(f Figures, evs []*Evidence, job Job) Verdict {
	v := Verdict{Figures: f, Predicted: job.Predicted, Confidence: High}
	p := job.Predicted
	capped := f.Allowed > 0
	switch {
	case f.GrowthPerStep > 0:
		v.Cause = Leak
		v.Reason = fmt.Sprintf("allocated memory grew by %s a step over %d steps", gib(f.GrowthPerStep), f.GrowthSteps)
		if f.StepsRun > 0 {
			v.Reason += fmt.Sprintf("; it ran out after %d steps", f.StepsRun)
		}
		v.Sites = leakSites(evs)
		if p == nil {
			v.Confidence = Medium
			v.Alternatives = []Alternative{{Pressure, "memory the job keeps by design (a growing cache or workspace) rises the same way; with the job's description memplan can say whether the growth is beyond what the job needs"}}
		}
	case p != nil && f.Allocated > int64(leakFactor*float64(p.PeakAllocated))+leakSlack && (f.Limit == 0 || p.PeakReserved <= f.Limit):
		v.Cause = Leak
		v.Reason = fmt.Sprintf("%s allocated at the error, %.1f× the %s memplan predicts at the peak of this job", gib(f.Allocated),
			float64(f.Allocated)/float64(p.PeakAllocated), gib(p.PeakAllocated))
		v.Sites = leakSites(evs)
	case !capped && f.DeviceTotal > 0 && f.OtherProcesses >= int64(othersShare*float64(f.DeviceTotal)) &&
		f.Reserved+f.Request+f.NonPyTorch <= f.DeviceTotal:
		v.Cause = OtherProcess
		v.Reason = fmt.Sprintf("other processes held %s of the device's %s; without them the request fits", gib(f.OtherProcesses), gib(f.DeviceTotal))
	case f.Reserved > 0 && float64(f.Stranded) >= strandedShare*float64(f.Reserved) && (f.Request == 0 || f.Stranded >= f.Missing || f.Limit == f.Reserved):
		v.Cause = Fragmentation
		v.Reason = fmt.Sprintf("%s of the %s reserved was free but in pieces", gib(f.Stranded), gib(f.Reserved))
		if f.Request > 0 {
			v.Reason += fmt.Sprintf("; the %s request needed %s more than the limit allowed", gib(f.Request), gib(f.Missing))
		}
	case p != nil && f.Limit > 0 && p.PeakReserved <= f.Limit && f.Allocated > p.PeakAllocated && (f.Request > 0 || f.OOMs > 0):
		v.Cause, v.Confidence = Leak, Low
		v.Reason = fmt.Sprintf("memplan predicts the job fits (%s reserved at the peak, of %s), yet it ran out holding %s allocated, %.2f× the %s predicted",
			gib(p.PeakReserved), gib(f.Limit), gib(f.Allocated), float64(f.Allocated)/float64(p.PeakAllocated), gib(p.PeakAllocated))
		v.Alternatives = []Alternative{{Pressure, fmt.Sprintf("below %.2f× the prediction, memplan under-predicting this job explains the figures as well; a stats series (one line per step) or a snapshot with a history of several steps tells", leakFactor)}}
		v.Sites = leakSites(evs)
	case p != nil && f.Limit > 0 && p.PeakReserved > f.Limit:
		v.Cause = Pressure
		v.Reason = fmt.Sprintf("memplan predicts %s reserved at the peak; the process could use %s", gib(p.PeakReserved), gib(f.Limit))
	case f.CarriedBytes > 0:
		v.Cause, v.Confidence = Leak, Low
		v.Sites = leakSites(evs)
		v.Reason = fmt.Sprintf("%d blocks (%s) allocated before the snapshot's history began are still held, made by code that allocated again within the history (it runs every step): memory that outlived the steps that made it", f.CarriedCopies, gib(f.CarriedBytes))
		v.Alternatives = []Alternative{{Pressure, "a buffer that keeps the last few of them on purpose looks the same in one dump; whether they keep growing shows in a stats series (one line per step) or a history of three or more steps (a larger max_entries)"}}
	case !capped && p != nil && f.DeviceTotal > 0 && f.Request == 0 && f.OOMs > 0 && float64(f.Reserved) < 0.8*float64(f.Limit):
		v.Cause = OtherProcess
		v.Reason = fmt.Sprintf("the job failed holding %s of a %s device that fits its predicted %s: something else held the rest",
			gib(f.Reserved), gib(f.DeviceTotal), gib(p.PeakReserved))
	case f.Request > 0 && f.Missing > 0, f.Request > 0 && f.DeviceFree > 0 && f.DeviceFree < f.Request,
		f.Request > 0 && f.Limit == f.Reserved, p != nil && f.OOMs > 0:
		v.Cause = Pressure
		v.Reason = fmt.Sprintf("the %s request did not fit: %s allocated", gib(f.Request), gib(f.Allocated))
		if f.Limit > 0 {
			v.Reason += " of the " + gib(f.Limit) + " the process could use"
		}
		if p == nil {
			pressureUnsure(&v, f)
		}
	case f.OOMs > 0 && float64(f.Stranded) < strandedShare*float64(f.Reserved):
		v.Cause, v.Confidence = Pressure, Low
		v.Reason = fmt.Sprintf("the job ran out with %s allocated of %s reserved: little was stranded, so not fragmentation", gib(f.Allocated), gib(f.Reserved))
		leak := "a single dump cannot show growth: a stats series, a snapshot with history or the job's description tells"
		if f.KeptPerStep > 0 {
			leak = keptWhy(f)
		}
		v.Alternatives = []Alternative{
			{Leak, leak},
			{OtherProcess, "the dump does not say what the device had free: the out-of-memory message tells"},
		}
	default:
		v.Cause = Unknown
		v.Reason = "the evidence does not tell the cause: give the out-of-memory message, or the job's description with the stats or summary"
	}
	v.Fixes = fixes(v)
	ddpRaceFinding(&v)
	return v
}

// ddpRaceFinding adds DDP's bucket rebuild race, seen in a snapshot, to
// whatever cause the rules found: a sentence of the reason, and the pause
// that removes it as the first fix (docs/diagnose.md §4a).
func ddpRaceFinding(v *Verdict) {
	n := v.Figures.DDPRaceBytes
	if n == 0 {
		return
	}
	v.Reason += fmt.Sprintf("; DDP's old flat gradient bucket (%s) was still allocated after its rebuild at the second step (the rebuild race, docs/multigpu.md)", gib(n))
	v.Fixes = append([]string{fmt.Sprintf("%s (once): NCCL then lets go of DDP's old gradient bucket before the rebuild, freeing %s (memplan estimate --step-pause %g predicts the job so)",
		estimate.PauseRecipe, gib(n), estimate.DDPSettle)}, v.Fixes...)
}

// pressureUnsure lowers a pressure verdict reached without the job's
// description: a full memory looks the same whether the job needs it or a
// leak filled it, unless a snapshot's history spans several steps without
// growth.
func pressureUnsure(v *Verdict, f Figures) {
	if f.HistorySteps >= minHistorySteps {
		v.Confidence = Medium
		v.Reason += fmt.Sprintf("; the history's %d steps show no growth", f.HistorySteps)
		return
	}
	v.Confidence = Low
	why := "a leak that filled the memory looks the same at the error; the job's description (to compare with memplan's prediction) or a stats series tells"
	switch {
	case f.KeptPerStep > 0:
		why = keptWhy(f)
	case f.HistorySteps > 0:
		why = fmt.Sprintf("the snapshot's history spans only %d step boundaries, too few to see growth; %s", f.HistorySteps, why[strings.Index(why, "the job's"):])
	}
	v.Alternatives = []Alternative{{Leak, why}}
	if f.DeviceTotal == 0 && f.Request > 0 && f.DeviceFree < f.Request {
		// A snapshot alone: the device was full, but its size is not
		// recorded, so what other processes held cannot be told.
		v.Alternatives = append(v.Alternatives, Alternative{OtherProcess, fmt.Sprintf(
			"a snapshot does not record the device's size: this process reserved %s and the device had %s free; on a device larger than that (and this process's context, about %s) other processes held the rest. --device NAME or the out-of-memory message tells",
			gib(f.Reserved), gib(f.DeviceFree), gib(contextBytes))})
	}
}

// keptWhy is why a leak stays possible when allocated memory rose over
// steps that freed nothing.
func keptWhy(f Figures) string {
	return fmt.Sprintf("allocated memory rose %s a step over %d steps that freed nothing: every allocation was kept, as a program filling memory on purpose does, and as a leak would; "+
		"a leak in a training or inference loop is what its steps fail to free, beside the temporaries they do free. What the program meant to keep is in none of the files: with the job's description memplan says whether it fits",
		gib(f.KeptPerStep), f.KeptSteps)
}

func leakSites(evs []*Evidence) []Site {
	for _, e := range evs {
		if e.Snapshot != nil && e.Snapshot.Growth != nil {
			return e.Snapshot.Growth.Sites
		}
	}
	for _, e := range evs {
		if e.Snapshot != nil && e.Snapshot.Carried != nil {
			return []Site{*e.Snapshot.Carried}
		}
	}
	return nil
}

// fixes are the changes that help with a cause, with figures where known.
func fixes(v Verdict) []string {
	f := v.Figures
	switch v.Cause {
	case Pressure:
		var out []string
		if p := v.Predicted; p != nil {
			if p.LargestBatch > 0 {
				out = append(out, fmt.Sprintf("--batch %d: the largest batch memplan predicts fits (the job asked for %d)", p.LargestBatch, p.Batch))
			}
			for _, c := range p.Changes {
				verdict := "fits"
				if !c.Fits {
					verdict = "still does not fit alone"
				}
				out = append(out, fmt.Sprintf("%s: predicted %s at batch %d (as asked: %s), %s",
					c.Change, gib(c.Bytes), p.Batch, gib(p.Asked), verdict))
			}
		}
		if len(out) == 0 {
			out = append(out, "a smaller batch (with gradient accumulation for the same global batch), activation checkpointing, bf16, a fused or 8-bit optimizer, or ZeRO/FSDP sharding: memplan tune and memplan estimate say which fits")
		}
		return out
	case Fragmentation:
		var out []string
		if !f.Expandable {
			out = append(out, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: segments grow in place, so freed pages serve larger requests")
		}
		return append(out,
			"allocate buffers whose size changes from step to step once, at their largest size, and reuse them",
			"PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:N (N below the large requests) keeps large blocks from being split by small tensors")
	case Leak:
		return []string{
			"log scalars with loss.item() (or .detach()), never the tensor: a kept loss keeps its whole graph",
			"do not append outputs or logits to a list; move what you need to the CPU (.detach().cpu()) or reduce it first",
			"evaluate under torch.no_grad() and bound caches (evict, or store on the CPU)",
			"zero_grad(set_to_none=True) (the default) frees gradients between steps",
		}
	case OtherProcess:
		return []string{
			"find the other processes: nvidia-smi --query-compute-apps=pid,used_memory --format=csv",
			"run the job on a free GPU (CUDA_VISIBLE_DEVICES), or stop the process holding memory",
		}
	}
	return nil
}
