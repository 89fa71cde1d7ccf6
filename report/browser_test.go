package report

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/memplan/memplan/model"
	"github.com/memplan/memplan/tuner"
)

// browser returns the headless browser to drive, or skips the test (fails
// when MEMPLAN_BROWSER_TEST=required, as in CI: .ci/run).
func browser(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no chromium on PATH: install it (.ci/install-browser) to test the HTML report in a browser"
	if os.Getenv("MEMPLAN_BROWSER_TEST") == "required" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

func loadSpec(path, dev string) (*model.Spec, error) {
	return model.Load(path, model.Overrides{Dev: dev})
}

// TestHTMLInBrowser loads the HTML report in headless Chromium: no console
// errors, every chart and table row present, and the table sorts. With
// MEMPLAN_SCREENSHOT=FILE it saves a screenshot there (docs/report.png).
func TestHTMLInBrowser(t *testing.T) {
	exe := browser(t)
	paths := []string{"../specs/gpt2-124m.yaml", "../specs/llama-3.2-1b.yaml", "../specs/llama-3-8b-zero3.yaml", "../specs/missing.yaml"}
	devs := []string{"l4", "a100-40gb", "a100-80gb", "h100-80gb", "h200-141gb"}
	r, err := Build(paths, devs, loadSpec, Options{Band: tuner.DefaultBand, Margin: tuner.DefaultMargin, Version: "test",
		Prices: map[string]float64{"h100-80gb": 2.5}})
	if err != ErrSomeFailed {
		t.Fatalf("Build: %v, want ErrSomeFailed for the missing spec", err)
	}
	file := filepath.Join(t.TempDir(), "report.html")
	var b strings.Builder
	if err := HTML(&b, r); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox,
		chromedp.WindowSize(1400, 1000))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	var mu sync.Mutex
	var problems []string
	listen := func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeWarning {
				problems = append(problems, "console "+string(e.Type))
			}
		case *runtime.EventExceptionThrown:
			problems = append(problems, "exception: "+e.ExceptionDetails.Text)
		}
	}
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithListener(listen))
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate("file://"+file), chromedp.WaitReady("#cells")); err != nil {
		t.Fatalf("browser: %v", err)
	}
	count := func(sel string) int {
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("`+sel+`").length`))
		if err != nil {
			t.Fatalf("count %s: %v", sel, err)
		}
		return n
	}
	charts, rows, failed := count("svg.chart"), count("#cells tbody tr"), count(".rowerr")
	firstFill := `document.querySelector("#cells tbody tr td:nth-child(4)").textContent`
	first, err := chromedp.Run(ctx, chromedp.Evaluate[string](firstFill))
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Click(`#cells th:nth-child(4)`), chromedp.Click(`#cells th:nth-child(4)`)); err != nil {
		t.Fatal(err)
	}
	afterSort, err := chromedp.Run(ctx, chromedp.Evaluate[string](firstFill))
	if err != nil {
		t.Fatal(err)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	good := len(paths) - 1
	if want := 3 * good; charts != want {
		t.Errorf("charts = %d, want %d (three per spec that loads)", charts, want)
	}
	if want := len(paths) * len(devs); rows != want {
		t.Errorf("table rows = %d, want %d", rows, want)
	}
	if failed != 1 {
		t.Errorf("failed rows shown = %d, want 1", failed)
	}
	if first == afterSort {
		t.Errorf("sorting by fill (descending) left %q first", first)
	}
	if len(problems) > 0 {
		t.Errorf("browser console: %v", problems)
	}
	if out := os.Getenv("MEMPLAN_SCREENSHOT"); out != "" {
		if err := os.WriteFile(out, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
