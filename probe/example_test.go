package probe_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/memplan/memplan/model"
	"github.com/memplan/memplan/probe"
)

// fakeH100 is a device with the H100's usable memory, context cost and
// allocation granularity, for examples that run without a GPU.
func fakeH100() *probe.Fake {
	return &probe.Fake{Name: "Fake H100", Total: 85_017_493_504, ContextBytes: 527 << 20, Granularity: 2 << 20}
}

// Run grows the batch on the device until its use sits inside the band.
// On a machine with a GPU, pass the driver from probe.Open instead of the
// fake.
func ExampleRun() {
	spec, err := model.Load("testdata/gpt2-124m.yaml", model.Overrides{})
	if err != nil {
		fmt.Println(err)
		return
	}
	r, err := probe.Run(context.Background(), fakeH100(), spec, probe.Options{Lo: 0.85, Hi: 0.90})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("largest batch %d, in the band: %v, %d steps\n", r.Batch, r.InBand, len(r.Steps))
	// Output: largest batch 47, in the band: true, 5 steps
}

// A plan that cannot fit is refused before anything is allocated.
func ExampleRun_noFit() {
	spec, err := model.Load("testdata/llama-3-8b.yaml", model.Overrides{})
	if err != nil {
		fmt.Println(err)
		return
	}
	dev := fakeH100()
	_, err = probe.Run(context.Background(), dev, spec, probe.Options{Lo: 0.85, Hi: 0.90})
	fmt.Println(errors.Is(err, probe.ErrNoFit), dev.Live())
	// Output: true 0
}

// A Session measures one plan at a time, as tune --probe and check --probe
// do; Close frees everything and releases the context.
func ExampleNewSession() {
	spec, err := model.Load("testdata/gpt2-124m.yaml", model.Overrides{Batch: 8})
	if err != nil {
		fmt.Println(err)
		return
	}
	s, err := probe.NewSession(context.Background(), fakeH100(), 0, 0.90)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	used, err := s.Measure(spec)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("batch 8 uses %.1f%% of the device\n", 100*float64(used)/float64(s.Total()))
	// Output: batch 8 uses 18.9% of the device
}

// Open fails with a typed error, carrying the loader's message and a
// hint, where there is no CUDA driver.
func ExampleOpen() {
	d, err := probe.Open()
	var de *probe.DriverError
	var nc *probe.NoCUDAError
	switch {
	case err == nil:
		n, _ := d.DeviceCount()
		fmt.Println("devices:", n > 0)
	case errors.As(err, &de), errors.As(err, &nc):
		fmt.Println("no driver")
	}
}
