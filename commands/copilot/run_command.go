package copilot

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"phonefleet/commands/fleet"
	"phonefleet/domain"
)

// RunCommand carries out one direct command on a device (POST
// /v1/copilot/commands): command mode, parsed without a model, so it is
// served whether or not the deployment has one.
type RunCommand struct {
	Auth     domain.Auth
	DeviceID string
	Command  string
}

// CommandResult is what a command did: the receipts of the actions it
// took, in order, and the frame it ended on.
type CommandResult struct {
	Command  domain.CopilotCommand
	Receipts []domain.Receipt
	FrameID  string
}

// RunCommandHandler handles RunCommand.
type RunCommandHandler struct{ c *Copilot }

// Handle parses the command and carries it out as the person through the
// fleet's commands: tap "X" taps the element showing X on the screen as
// observed now; type types into the focused field; open taps the app's
// icon on the home screen (or opens a package name); back and home press
// the key; swipe swipes across the middle of the screen; screenshot
// observes. The person's lease is used, or one is taken for the command
// and given back. Refusals: permission_denied, invalid_argument (the
// command, an element or app not on the screen), and the fleet's.
func (h RunCommandHandler) Handle(ctx context.Context, cmd RunCommand) (CommandResult, error) {
	c, a := h.c, cmd.Auth
	if err := access(a); err != nil {
		return CommandResult{}, err
	}
	parsed, err := domain.ParseCopilotCommand(cmd.Command)
	if err != nil {
		return CommandResult{}, err
	}
	if _, err := c.devices.GetDevice.Handle(ctx, fleet.GetDevice{Auth: a, DeviceID: cmd.DeviceID}); err != nil {
		return CommandResult{}, err
	}
	r := commandRun{c: c, auth: a, device: cmd.DeviceID, key: "copilot-cmd-" + domain.NewID(domain.PrefixRequest)}
	defer r.giveBack(ctx)
	res := CommandResult{Command: parsed}
	observe := func(elements string) (fleet.Observation, error) {
		obs, err := c.devices.Observe.Handle(ctx, fleet.ObserveDevice{Auth: a, DeviceID: cmd.DeviceID, Elements: elements})
		if err == nil {
			res.FrameID = obs.Frame.FrameID
		}
		return obs, err
	}
	act := func(action string, args any, frame string) error {
		raw, _ := json.Marshal(args)
		rc, err := r.act(ctx, action, raw, frame)
		if err != nil {
			return err
		}
		res.Receipts = append(res.Receipts, rc)
		if rc.Frames.After != "" {
			res.FrameID = rc.Frames.After
		}
		return nil
	}
	tapText := func(text, what string) error {
		obs, err := observe(domain.ElementsAll)
		if err != nil {
			return err
		}
		ref := findElement(obs.Elements, text)
		if ref == "" {
			return domain.Errorf(domain.CodeInvalidArgument, "no %s %q on the screen; %s", what, text, domain.CopilotCommandHelp).
				With("field", "command").With("frameId", obs.Frame.FrameID)
		}
		return act(string(domain.ActionTap), map[string]string{"ref": ref}, obs.Frame.FrameID)
	}
	switch parsed.Verb {
	case domain.CommandTap:
		err = tapText(parsed.Arg, "element showing")
	case domain.CommandType:
		err = act(string(domain.ActionTypeText), map[string]string{"text": parsed.Arg}, "")
	case domain.CommandOpen:
		if !strings.ContainsAny(parsed.Arg, " ") && strings.Count(parsed.Arg, ".") >= 1 {
			err = act(string(domain.ActionOpenApp), map[string]string{"package": parsed.Arg}, "")
			break
		}
		if err = act(string(domain.ActionKey), map[string]string{"key": "HOME"}, ""); err == nil {
			err = tapText(parsed.Arg, "app named")
		}
	case domain.CommandBack, domain.CommandHome:
		err = act(string(domain.ActionKey), map[string]string{"key": strings.ToUpper(parsed.Verb)}, "")
	case domain.CommandSwipe:
		var obs fleet.Observation
		if obs, err = observe(domain.ElementsNone); err == nil {
			w, ht := obs.Width, obs.Height
			x1, y1, x2, y2 := w/2, ht*7/10, w/2, ht*3/10
			switch parsed.Arg {
			case "down":
				y1, y2 = y2, y1
			case "left":
				x1, y1, x2, y2 = w*8/10, ht/2, w*2/10, ht/2
			case "right":
				x1, y1, x2, y2 = w*2/10, ht/2, w*8/10, ht/2
			}
			err = act(string(domain.ActionSwipe), map[string]int{"x1": x1, "y1": y1, "x2": x2, "y2": y2, "durationMs": 300}, obs.Frame.FrameID)
		}
	case domain.CommandScreenshot:
		_, err = observe(domain.ElementsNone)
	}
	if err != nil {
		return res, err
	}
	return res, nil
}

// findElement returns the ref of the element whose text (or description)
// is text, ignoring case and surrounding space; a clickable one first.
func findElement(els []domain.Element, text string) string {
	want := strings.ToLower(strings.TrimSpace(text))
	ref := ""
	for _, e := range els {
		if strings.ToLower(strings.TrimSpace(e.Text)) == want || strings.ToLower(strings.TrimSpace(e.Desc)) == want {
			if e.Clickable {
				return e.Ref
			}
			if ref == "" {
				ref = e.Ref
			}
		}
	}
	return ref
}

// commandRun is one command's actions under the person's lease.
type commandRun struct {
	c        *Copilot
	auth     domain.Auth
	device   string
	key      string
	n        int
	lease    string
	acquired bool
}

func (r *commandRun) act(ctx context.Context, action string, args json.RawMessage, frame string) (domain.Receipt, error) {
	if r.lease == "" {
		l, err := r.c.personsLease(ctx, r.auth, r.device)
		if err != nil {
			return domain.Receipt{}, err
		}
		if l != nil {
			r.lease = l.LeaseID
		} else {
			nl, err := r.c.devices.AcquireLease.Handle(ctx, fleet.AcquireLease{Auth: r.auth, DeviceID: r.device, TTLSeconds: 120})
			if err != nil {
				return domain.Receipt{}, err
			}
			r.lease, r.acquired = nl.LeaseID, true
		}
	}
	r.n++
	out, err := r.c.devices.Act.Handle(ctx, fleet.PerformAction{Auth: r.auth, DeviceID: r.device, Action: action, Arguments: args,
		IdempotencyKey: fmt.Sprintf("%s-%d", r.key, r.n), LeaseID: r.lease, ObservedFrame: frame})
	return out.Receipt, err
}

func (r *commandRun) giveBack(ctx context.Context) {
	if !r.acquired {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	_, _ = r.c.devices.ReleaseLease.Handle(ctx, fleet.ReleaseLease{Auth: r.auth, DeviceID: r.device, LeaseID: r.lease})
}
