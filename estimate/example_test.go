package estimate_test

import (
	"fmt"
	"log"

	"github.com/memplan/memplan/estimate"
	"github.com/memplan/memplan/internal/units"
	"github.com/memplan/memplan/model"
)

// Estimate predicts the three totals PyTorch users see, and whether the
// run fits its device.
func ExampleEstimate() {
	s, err := model.Load("../specs/gpt2-124m.yaml", model.Overrides{Batch: 8, Dev: "a100-40gb"})
	if err != nil {
		log.Fatal(err)
	}
	r, err := estimate.Estimate(s)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("parameters:", r.Params)
	fmt.Println("peak allocated:", units.Format(r.PeakAllocated))
	fmt.Println("peak reserved:", units.Format(r.PeakReserved))
	fmt.Println("device total:", units.Format(r.DeviceTotal), "fits:", r.Fits)
	fmt.Println("peak during:", r.PeakPhase)
	// Output:
	// parameters: 124439808
	// peak allocated: 12.63 GiB
	// peak reserved: 14.21 GiB
	// device total: 14.95 GiB fits: true
	// peak during: backward (later steps)
}

// EstimateOptions replays the run under a cap on reserved memory, as
// torch.cuda.set_per_process_memory_fraction does; OOM says it would fail.
func ExampleEstimateOptions() {
	s, err := model.Load("../specs/gpt2-124m.yaml", model.Overrides{Batch: 8})
	if err != nil {
		log.Fatal(err)
	}
	for _, limit := range []int64{4 * units.GiB, 64 * units.GiB} {
		r, err := estimate.EstimateOptions(s, estimate.Options{ReservedLimit: limit})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(units.Format(limit), "OOM:", r.OOM)
	}
	// Output:
	// 4.00 GiB OOM: true
	// 64.00 GiB OOM: false
}

// A search that only asks whether a run fits can stop its simulation once
// the device total is known to be above the limit: Llama-3-8B at batch 8
// is far over an 80 GB GPU, and its estimate stops early with a lower
// bound; under a level it does not reach, the result is Estimate's.
func ExampleEstimateOptions_stopAbove() {
	s, err := model.Load("../specs/llama-3-8b.yaml", model.Overrides{Batch: 8, Dev: "h100-80gb"})
	if err != nil {
		log.Fatal(err)
	}
	full, err := estimate.Estimate(s)
	if err != nil {
		log.Fatal(err)
	}
	for _, level := range []int64{70 * units.GiB, 600 * units.GiB} {
		r, err := estimate.EstimateOptions(s, estimate.Options{StopAbove: level})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("stop above %s: stopped %v, above the level %v, Estimate's total %v\n",
			units.Format(level), r.Stopped, r.DeviceTotal > level, r.DeviceTotal == full.DeviceTotal)
	}
	// Output:
	// stop above 70.00 GiB: stopped true, above the level true, Estimate's total false
	// stop above 600.00 GiB: stopped false, above the level false, Estimate's total true
}

// A QLoRA run (specs/qlora: nf4 base, bf16 adapters, paged 32-bit AdamW)
// lists what is modelled from bitsandbytes' source and unmeasured, and
// carries the paged optimizer state as device memory outside PyTorch's
// allocator.
func ExampleEstimate_qlora() {
	s, err := model.Load("../specs/qlora/llama-7b.yaml", model.Overrides{})
	if err != nil {
		log.Fatal(err)
	}
	r, err := estimate.Estimate(s)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("trainable:", r.Trainable, "unmeasured:", r.Unmeasured)
	for _, o := range r.Overhead {
		if o.Name == estimate.OverheadPaged {
			fmt.Println(o.Name+":", units.Format(o.Bytes))
		}
	}
	fmt.Println("peak reserved:", units.Format(r.PeakReserved), "device total:", units.Format(r.DeviceTotal))
	// Output:
	// trainable: 159907840 unmeasured: [quant bnb_optimizer]
	// paged optimizer state (unified memory): 1.19 GiB
	// peak reserved: 4.71 GiB device total: 6.65 GiB
}

// MayRace says whether DDP's bucket rebuild can keep its old gradient
// bucket (docs/multigpu.md); the estimate then says how much in
// DDPRaceBytes, and a pause after the first step removes it.
func ExampleMayRace() {
	s, err := model.Load("../specs/gpt2-124m.yaml", model.Overrides{DP: 2})
	if err != nil {
		log.Fatal(err)
	}
	for _, pause := range []float64{0, estimate.DDPSettle} {
		s.Training.StepPause = pause
		r, err := estimate.Estimate(s)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("pause %g s: may race %v, old bucket kept %s\n", pause, estimate.MayRace(s.Training), units.Format(r.DDPRaceBytes))
	}
	// Output:
	// pause 0 s: may race true, old bucket kept 474.70 MiB
	// pause 0.2 s: may race false, old bucket kept 0 B
}

// Under FSDP2 the model is taken to be built on the host and sharded by
// fully_shard unit by unit (transformers' from_pretrained);
// Training.FSDPInit (--fsdp-init) also takes a model moved whole to the
// GPU first (gpu) or made on the meta device and materialised in place
// (meta, torchtitan). The freed whole parameters leave holes among the
// shards that the step's allocations fill differently.
func ExampleEstimate_fsdpInit() {
	for _, init := range []string{"host", "gpu", "meta"} {
		s, err := model.LoadHF("../model/testdata/hf/roberta-base.json", model.Overrides{Batch: 16, Seq: 512,
			Precision: "bf16", DP: 2, Zero: "3", LoRA: 16, LoRATargets: "attn", FSDPInit: init})
		if err != nil {
			log.Fatal(err)
		}
		r, err := estimate.Estimate(s)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("fsdp_init %s: peak reserved %s\n", init, units.Format(r.PeakReserved))
	}
	// Output:
	// fsdp_init host: peak reserved 6.22 GiB
	// fsdp_init gpu: peak reserved 6.24 GiB
	// fsdp_init meta: peak reserved 5.45 GiB
}

// NCCLFloor is the NCCL memory every rank of a layout holds at least,
// without a simulation: one communicator for plain data parallelism, more
// for each further mesh dimension.
func ExampleNCCLFloor() {
	for _, t := range []model.Training{{DP: 8}, {DP: 4, TP: 2}, {DP: 2, TP: 2, PP: 2}} {
		fmt.Printf("dp %d tp %d pp %d: %s\n", t.DP, max(t.TP, 1), max(t.PP, 1), units.Format(estimate.NCCLFloor(t)))
	}
	// Output:
	// dp 8 tp 1 pp 1: 840.00 MiB
	// dp 4 tp 2 pp 1: 1.77 GiB
	// dp 2 tp 2 pp 2: 2.40 GiB
}
