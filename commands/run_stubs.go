package commands

import (
	"context"

	"phonefleet/domain"
	"phonefleet/projections"
)

func (r *Runs) Start(ctx context.Context, cmd StartRun) (StartedRun, error)            { panic("todo") }
func (r *Runs) Pause(ctx context.Context, cmd PauseRun) (projections.RunView, error)   { panic("todo") }
func (r *Runs) Resume(ctx context.Context, cmd ResumeRun) (projections.RunView, error) { panic("todo") }
func (r *Runs) Cancel(ctx context.Context, cmd CancelRun) (projections.RunView, error) { panic("todo") }
func (r *Runs) Claim(ctx context.Context, cmd ClaimRun) (domain.Run, error)            { panic("todo") }
func (r *Runs) EndOverdue(ctx context.Context, cmd EndOverdueRun) (bool, error)        { panic("todo") }
func (r *Runs) Observe(ctx context.Context, cmd RunObserve) (RunObservation, error)    { panic("todo") }
func (r *Runs) Act(ctx context.Context, cmd RunAct) (ActOutcome, error)                { panic("todo") }
func (r *Runs) NeedsUser(ctx context.Context, cmd RunNeedsUser) (projections.RunView, error) {
	panic("todo")
}
func (r *Runs) Finish(ctx context.Context, cmd RunFinish) (projections.RunView, error) { panic("todo") }
func (r *Runs) List(ctx context.Context, cmd ListRuns) (projections.RunPage, error)    { panic("todo") }
func (r *Runs) Get(ctx context.Context, cmd GetRun) (projections.RunView, error)       { panic("todo") }
func (r *Runs) Frames(ctx context.Context, cmd ListRunFrames) (projections.RunFramePage, error) {
	panic("todo")
}
func (r *Runs) Script(ctx context.Context, cmd GetRunScript) (RunScript, error)    { panic("todo") }
func (r *Runs) Info(ctx context.Context, cmd RunInfo) (projections.RunView, error) { panic("todo") }
func (r *Runs) GetFrame(ctx context.Context, cmd RunGetFrame) (Frame, error)       { panic("todo") }
