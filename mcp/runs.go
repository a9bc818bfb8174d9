package mcp

import (
	"context"
	"encoding/json"
	"slices"

	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"phonefleet/commands"
	"phonefleet/commands/runs"
	"phonefleet/domain"
	"phonefleet/http/wire"
	"phonefleet/projections"
)

// The run tools run the handlers and queries of /v1/runs and answer the
// same shapes (package wire). Like those routes they need runs:start AND
// devices:act (spec 5.4), so a credential lacking either does not see
// them; OAuth apps holding both see them too (spec 5.2: device and run
// tools). The handlers check scopes and tenancy again: another
// organisation's run is run_not_found, as one that never existed.

const sRunID = `{"type":"string","pattern":"^a?run_[0-9a-f]{32}$","description":"The run: its runId (run_…) or agentRunId (arun_…)."}`

// runTool defines a run tool: scopes runs:start and devices:act.
func runTool(name, title, description, schema string, h hints) *tool {
	return newTool(name, title, description, schema, h, domain.ScopeRunsStart, domain.ScopeDevicesAct)
}

type startRunArgs struct {
	DeviceID        string               `json:"deviceId"`
	Goal            string               `json:"goal"`
	MaxSteps        int                  `json:"maxSteps"`
	DeadlineSeconds int                  `json:"deadlineSeconds"`
	Executor        string               `json:"executor"`
	SuccessCheck    *domain.SuccessCheck `json:"successCheck"`
	Script          json.RawMessage      `json:"script"`
}

type listRunsArgs struct {
	State           string `json:"state"`
	DeviceID        string `json:"deviceId"`
	StarterUserID   string `json:"starterUserId"`
	StarterAPIKeyID string `json:"starterApiKeyId"`
	Before          string `json:"before"`
	Limit           int    `json:"limit"`
}

type runArgs struct {
	RunID string `json:"runId"`
	After string `json:"after"`
	Limit int    `json:"limit"`
}

func (s *Server) runTools() []*tool {
	states, _ := json.Marshal(domain.RunStates)
	start := runTool("start_run", "Start a run",
		"Hand a phone to an autonomous run working towards goal; executor external returns vrxBaseUrl for you to drive it.",
		object([]string{"goal"},
			prop{"deviceId", sDeviceID},
			prop{"goal", `{"type":"string","minLength":1,"maxLength":4000,"description":"What the run is to achieve, in words."}`},
			prop{"maxSteps", `{"type":"integer","minimum":1,"maximum":1000,"description":"Actions allowed (default 50)."}`},
			prop{"deadlineSeconds", `{"type":"integer","minimum":10,"maximum":86400,"description":"Seconds until the run ends failed with deadline_exceeded (default 1800)."}`},
			prop{"executor", `{"type":"string","enum":["builtin","external"],"description":"builtin (default): the service's agent drives; external: you drive through vrxBaseUrl."}`},
			prop{"successCheck", `{"type":"object","additionalProperties":false,"minProperties":1,"properties":{` +
				`"text":{"type":"string","maxLength":200,"description":"An element whose text contains this."},` +
				`"elementId":{"type":"string","maxLength":200,"description":"An element with this resource id."},` +
				`"app":{"type":"string","maxLength":200,"description":"This app (package) is in front."}},` +
				`"description":"Verified on the final screen: a succeeded that fails it ends failed with success_check_failed."}`},
			prop{"script", `{"type":"object","required":["steps"],"description":"A script to replay, as a run's exported script (version, goal, steps)."}`}),
		hints{})
	start.run = run(s, func(ctx context.Context, app *commands.Application, a domain.Auth, args startRunArgs) (*mcpgo.CallToolResult, error) {
		started, err := app.Runs.StartRun.Handle(ctx, runs.StartRun{Auth: a, DeviceID: args.DeviceID, Goal: args.Goal,
			MaxSteps: args.MaxSteps, DeadlineSeconds: args.DeadlineSeconds, Executor: args.Executor, SuccessCheck: args.SuccessCheck,
			Script: args.Script})
		if err != nil {
			return nil, err
		}
		return jsonResult(wire.NewStartedRun(started))
	})

	list := runTool("list_runs", "List runs",
		"The organisation's runs, newest first; filter by state, deviceId, starter. Page: before=nextBefore.",
		object(nil,
			prop{"state", `{"type":"string","enum":` + string(states) + `,"description":"Only runs in this state."}`},
			prop{"deviceId", sDeviceID},
			prop{"starterUserId", `{"type":"string","minLength":1,"maxLength":255,"description":"Only runs this person started."}`},
			prop{"starterApiKeyId", `{"type":"string","minLength":1,"maxLength":255,"description":"Only runs this API key started."}`},
			prop{"before", `{"type":"string","maxLength":64,"description":"The nextBefore of the previous page."}`},
			prop{"limit", sLimit}),
		hints{readOnly: true})
	list.run = run(s, func(ctx context.Context, app *commands.Application, a domain.Auth, args listRunsArgs) (*mcpgo.CallToolResult, error) {
		if args.StarterUserID != "" && args.StarterAPIKeyID != "" {
			return nil, domain.Errorf(domain.CodeInvalidArgument, "give starterUserId or starterApiKeyId, not both (a run has one starter)")
		}
		if args.State != "" && !slices.Contains(domain.RunStates, args.State) {
			return nil, domain.Errorf(domain.CodeInvalidArgument, "state must be one of %v", domain.RunStates)
		}
		page, err := app.Runs.ListRuns.Handle(ctx, runs.ListRuns{Auth: a, RunQuery: projections.RunQuery{State: args.State,
			DeviceID: args.DeviceID, StarterUserID: args.StarterUserID, StarterKeyID: args.StarterAPIKeyID, Before: args.Before, Limit: args.Limit}})
		if err != nil {
			return nil, err
		}
		return jsonResult(wire.NewRunPage(page))
	})

	get := runTool("get_run", "Get a run",
		"One run by runId or agentRunId: state, steps taken, deadline, why it ended or is parked.",
		object([]string{"runId"}, prop{"runId", sRunID}), hints{readOnly: true})
	get.run = run(s, func(ctx context.Context, app *commands.Application, a domain.Auth, args runArgs) (*mcpgo.CallToolResult, error) {
		v, err := app.Runs.GetRun.Handle(ctx, runs.GetRun{Auth: a, RunID: args.RunID})
		if err != nil {
			return nil, err
		}
		return jsonResult(wire.NewRun(v))
	})

	pause := runTool("pause_run", "Pause a run",
		"Pause a queued or running run between steps; resume_run continues it.",
		object([]string{"runId"}, prop{"runId", sRunID}), hints{idempotent: true})
	pause.run = run(s, func(ctx context.Context, app *commands.Application, a domain.Auth, args runArgs) (*mcpgo.CallToolResult, error) {
		v, err := app.Runs.PauseRun.Handle(ctx, runs.PauseRun{Auth: a, RunID: args.RunID})
		if err != nil {
			return nil, err
		}
		return jsonResult(wire.NewRun(v))
	})

	resume := runTool("resume_run", "Resume a run",
		"Continue a paused run, or a parked one (awaiting_user) once the person is done.",
		object([]string{"runId"}, prop{"runId", sRunID}), hints{idempotent: true})
	resume.run = run(s, func(ctx context.Context, app *commands.Application, a domain.Auth, args runArgs) (*mcpgo.CallToolResult, error) {
		v, err := app.Runs.ResumeRun.Handle(ctx, runs.ResumeRun{Auth: a, RunID: args.RunID})
		if err != nil {
			return nil, err
		}
		return jsonResult(wire.NewRun(v))
	})

	cancel := runTool("cancel_run", "Cancel a run",
		"End a run (cancelled) and release its device; its vrxBaseUrl stops working.",
		object([]string{"runId"}, prop{"runId", sRunID}), hints{destructive: true, idempotent: true})
	cancel.run = run(s, func(ctx context.Context, app *commands.Application, a domain.Auth, args runArgs) (*mcpgo.CallToolResult, error) {
		v, err := app.Runs.CancelRun.Handle(ctx, runs.CancelRun{Auth: a, RunID: args.RunID})
		if err != nil {
			return nil, err
		}
		return jsonResult(wire.NewRun(v))
	})

	frames := runTool("get_run_frames", "List a run's frames",
		"The frames a run saw, oldest first (observed, before, after); read one with get_frame. Page: after=nextAfter.",
		object([]string{"runId"}, prop{"runId", sRunID},
			prop{"after", `{"type":"string","pattern":"^[0-9]+$","maxLength":19,"description":"The nextAfter of the previous page."}`},
			prop{"limit", sLimit}),
		hints{readOnly: true})
	frames.run = run(s, func(ctx context.Context, app *commands.Application, a domain.Auth, args runArgs) (*mcpgo.CallToolResult, error) {
		after, ok := wire.ParseRunFrameCursor(args.After)
		if !ok {
			return nil, domain.Errorf(domain.CodeInvalidArgument, "after must be a value returned as nextAfter")
		}
		page, err := app.Runs.ListRunFrames.Handle(ctx, runs.ListRunFrames{Auth: a, RunID: args.RunID,
			RunFrameQuery: projections.RunFrameQuery{After: after, Limit: args.Limit}})
		if err != nil {
			return nil, err
		}
		return jsonResult(wire.NewRunFramePage(page))
	})
	divergence := runTool("get_run_divergence", "Replay divergence",
		"Where a replay first diverged from its script: step, reason, both frames.",
		object([]string{"runId"}, prop{"runId", sRunID}), hints{readOnly: true})
	divergence.run = run(s, func(ctx context.Context, app *commands.Application, a domain.Auth, args runArgs) (*mcpgo.CallToolResult, error) {
		d, err := app.Runs.GetRunDivergence.Handle(ctx, runs.GetRunDivergence{Auth: a, RunID: args.RunID})
		if err != nil {
			return nil, err
		}
		return jsonResult(wire.NewRunDivergence(d))
	})
	return []*tool{start, list, get, pause, resume, cancel, frames, divergence}
}
