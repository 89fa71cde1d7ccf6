package tuner

import (
	"runtime"

	"github.com/memplan/memplan/estimate"
	"github.com/memplan/memplan/model"
)

// AdviceEstimates are the estimates the allocator advice needs, made on
// other cores while the caller makes the spec's own (StartAdviceEstimates):
// a command that prints the advice waits for the longer of the two instead
// of their sum.
type AdviceEstimates struct {
	runs map[string]*adviceRun // written before any goroutine starts, then only read
}

type adviceRun struct {
	done  chan struct{}
	total int64
	err   error
}

// StartAdviceEstimates starts estimating spec under each of
// AdviceCandidates(spec.Training.AllocConf), one goroutine each, and
// returns them; nil when the process runs on one core (GOMAXPROCS 1, where
// they would only take the caller's time) or there is no candidate. The
// estimates are whole (not stopped), so AdviseAllocConfStop through Oracle
// gives the advice AnalyticStop would (TestAdviceEstimates).
func StartAdviceEstimates(spec *model.Spec) *AdviceEstimates {
	cands := AdviceCandidates(spec.Training.AllocConf)
	if runtime.GOMAXPROCS(0) < 2 || len(cands) == 0 {
		return nil
	}
	a := &AdviceEstimates{runs: map[string]*adviceRun{}}
	for _, conf := range cands {
		run := &adviceRun{done: make(chan struct{})}
		a.runs[conf] = run
		s := *spec
		s.Training.AllocConf = conf
		go func() {
			defer close(run.done)
			r, err := estimate.Estimate(&s)
			if err == nil {
				run.total = r.DeviceTotal
			}
			run.err = err
		}()
	}
	return a
}

// Oracle is a StopOracle for AdviseAllocConfStop: the background estimate
// of s's allocator setting when one was started, waited for, else
// AnalyticStop.
func (a *AdviceEstimates) Oracle(s *model.Spec, above int64) (int64, bool, error) {
	run := a.runs[s.Training.AllocConf]
	if run == nil {
		return AnalyticStop(s, above)
	}
	<-run.done
	return run.total, false, run.err
}
