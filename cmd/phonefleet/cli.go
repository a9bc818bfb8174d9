package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"phonefleet/cmd/phonefleet/service"
	"phonefleet/internal/config"
)

// cliCommand is one command of phonefleet: the words that name it, its
// help, the configuration it reads and how it runs.
type cliCommand struct {
	// words name the command ("receipts verify").
	words string
	// synopsis is its line in the list of commands.
	synopsis string
	// help is its usage lines and what it does, as -h prints them above
	// its flags.
	help string
	// flags registers the command's own flags (nil: none), for -h; the
	// command registers the same ones, with its own targets, when it runs.
	flags func(fs *flag.FlagSet)
	// settings are the configuration flags it reads beside its own
	// (database-url, …); settingsAll: every one (serve).
	settings []string
	run      func(ctx context.Context, c cliCommand, args []string, out io.Writer) error
}

// settingsAll marks a command reading every configuration setting.
var settingsAll = []string{"*"}

// databaseSettings are what a command opening the service's database reads.
var databaseSettings = []string{"database-url", "data-dir", "log-level"}

// cliCommands are the commands of phonefleet, in the order help lists them.
func cliCommands() []cliCommand {
	return []cliCommand{
		{words: "serve", synopsis: "run the service", help: serveHelp, settings: settingsAll, run: serveCmd},
		{words: "gateway", synopsis: "serve this computer's phones to the control plane (settings: GATEWAY_* variables)",
			help: gatewayUsage, run: gatewayCmd},
		{words: "migrate", synopsis: "apply database migrations", help: migrateHelp, settings: databaseSettings, run: migrateCmd},
		{words: "projections status", synopsis: "show each projection's position, lag, state and rebuild progress",
			help: projectionsStatusHelp, settings: databaseSettings, run: projectionsStatusCmd},
		{words: "projections rebuild", synopsis: "rebuild a projection from position 0 without downtime",
			help: projectionsRebuildHelp, settings: databaseSettings, run: projectionsRebuildCmd},
		{words: "events tail", synopsis: "print the ordered event feed (for auditors)", help: eventsTailHelp,
			flags: (&eventsTailOptions{}).register, settings: databaseSettings, run: eventsTailCmd},
		{words: "receipts verify", synopsis: "check an export of the receipt chain offline (FILE), or the receipts read model against the history",
			help: receiptsVerifyHelp, flags: (&receiptsVerifyOptions{}).register, settings: databaseSettings, run: receiptsVerifyCmd},
		{words: "receipts rotate-key", synopsis: "replace the key that signs receipt checkpoints (the old one stays published)",
			help: receiptsRotateKeyHelp, settings: databaseSettings, run: receiptsRotateKeyCmd},
		{words: "devices add", synopsis: "register devices (as events) for an organisation", help: devicesUsage,
			flags: (&devicesAddOptions{}).register, settings: append(slices.Clone(databaseSettings), "adb-addr"), run: devicesAddCmd},
		{words: "fulfilments refund", synopsis: "the owner's refund of one phone (no webhook is sent)", help: fulfilmentsRefundUsage,
			settings: databaseSettings, run: fulfilmentsRefundCmd},
		{words: "fulfilments reconcile", synopsis: "compare orders and fulfilments with the payment provider (exit 1: differences)",
			help: reconcileUsage, flags: (&reconcileOptions{}).register,
			settings: append(slices.Clone(databaseSettings), "stripe-secret-key", "stripe-api-base"), run: reconcileCmd},
		{words: "payments followups", synopsis: "list payment follow-ups the provider refused or that gave up", help: paymentsFollowupsUsage,
			flags: (&paymentsFollowupsOptions{}).register, settings: databaseSettings, run: paymentsFollowupsCmd},
		{words: "payments followups retry", synopsis: "make a refused or given-up payment follow-up due again", help: paymentsFollowupsRetryUsage,
			settings: databaseSettings, run: paymentsFollowupsRetryCmd},
		{words: "payments followups settle", synopsis: "close a refused or given-up payment follow-up by hand, with a reason",
			help: paymentsFollowupsSettleUsage, flags: (&paymentsFollowupsSettleOptions{}).register, settings: databaseSettings,
			run: paymentsFollowupsSettleCmd},
		{words: "login", synopsis: "sign this CLI in: approve its code in the console; the key is stored 0600", help: loginUsage,
			flags: (&loginOptions{}).register, run: loginCmd},
		{words: "logout", synopsis: "revoke the stored key and remove it", help: logoutUsage, run: logoutCmd},
		{words: "version", synopsis: "print the version", help: "usage: phonefleet version\n\nPrints the version.", run: versionCmd},
	}
}

// usage is the list of commands.
func usage() string {
	var b strings.Builder
	b.WriteString("usage: phonefleet <command> [arguments] [flags]\n\ncommands:\n")
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	for _, c := range cliCommands() {
		fmt.Fprintf(tw, "  %s\t%s\n", c.words, c.synopsis)
	}
	_ = tw.Flush()
	b.WriteString("\nphonefleet <command> -h describes a command and its flags.\n")
	return b.String()
}

// usageError is a mistake in the command line: exit code 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func exitCode(err error) int {
	var u usageError
	if errors.As(err, &u) {
		return 2
	}
	// A command may choose its own status (fulfilments reconcile: 1 for
	// differences found, 2 when nothing could be compared).
	var c interface{ ExitCode() int }
	if errors.As(err, &c) {
		return c.ExitCode()
	}
	return 1
}

// run finds the command args name and runs it; -h (or -help, --help)
// anywhere before "--" prints the command's help instead.
func run(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		return usageError{usage()}
	}
	if args[0] == "help" || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
		if len(args) > 1 {
			return run(ctx, append(args[1:], "-h"), out)
		}
		_, err := fmt.Fprint(out, usage())
		return err
	}
	c, rest, family := lookupCommand(args)
	if c == nil {
		if family != "" {
			return usageError{familyUsage(family)}
		}
		return usageError{fmt.Sprintf("unknown command %q\n\n%s", args[0], usage())}
	}
	if helpAsked(rest) {
		return printHelp(out, *c)
	}
	err := c.run(ctx, *c, rest, out)
	if errors.Is(err, flag.ErrHelp) {
		return nil // the command's flag set printed its help
	}
	return err
}

// lookupCommand returns the command args name (the longest match of its
// words) and the rest of args; family names the first word when it names
// several commands but not one (projections without status or rebuild).
func lookupCommand(args []string) (*cliCommand, []string, string) {
	var best *cliCommand
	n, family := 0, ""
	for _, c := range cliCommands() {
		words := strings.Fields(c.words)
		if len(words) > 1 && words[0] == args[0] {
			family = args[0]
		}
		if len(words) <= len(args) && slices.Equal(words, args[:len(words)]) && len(words) > n {
			best, n = &c, len(words)
		}
	}
	if best != nil {
		return best, args[n:], ""
	}
	return nil, nil, family
}

// familyUsage is the usage lines of a family's commands (phonefleet
// projections status, phonefleet projections rebuild NAME).
func familyUsage(family string) string {
	var b strings.Builder
	for _, c := range cliCommands() {
		if first, _, ok := strings.Cut(c.words, " "); !ok || first != family {
			continue
		}
		for _, line := range strings.Split(c.help, "\n") {
			line = strings.TrimSpace(line)
			if !strings.HasPrefix(line, "usage: ") && !strings.HasPrefix(line, "phonefleet ") {
				break
			}
			if b.Len() == 0 {
				b.WriteString(line)
			} else {
				b.WriteString("\n       " + strings.TrimPrefix(line, "usage: "))
			}
		}
	}
	b.WriteString("\n\nphonefleet " + family + " <command> -h describes a command and its flags.")
	return b.String()
}

func helpAsked(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if a == "-h" || a == "-help" || a == "--help" {
			return true
		}
	}
	return false
}

// printHelp prints c's help: its usage and what it does, its own flags,
// and the configuration it reads (flag, environment variable, default).
func printHelp(out io.Writer, c cliCommand) error {
	var b strings.Builder
	b.WriteString(strings.TrimRight(c.help, "\n"))
	b.WriteString("\n")
	if c.flags != nil {
		own := flag.NewFlagSet(c.words, flag.ContinueOnError)
		c.flags(own)
		b.WriteString("\nflags:\n")
		own.SetOutput(&b)
		own.PrintDefaults()
	}
	if len(c.settings) > 0 {
		b.WriteString("\nconfiguration (the environment variable is read first; the flag overrides it):\n")
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		for _, s := range config.Settings() {
			if slices.Equal(c.settings, settingsAll) || slices.Contains(c.settings, s.Flag) {
				def := s.Default
				if def == "" {
					def = "unset"
				}
				fmt.Fprintf(tw, "  -%s\t%s\t%s (default %s)\n", s.Flag, s.Env, s.Usage, def)
			}
		}
		_ = tw.Flush()
	}
	_, err := fmt.Fprint(out, b.String())
	return err
}

// loadConfig reads the configuration (the environment, then args as
// flags) for command c, whose own flags extra registers first. -h prints
// c's help to out and answers flag.ErrHelp.
func loadConfig(c cliCommand, args []string, out io.Writer, extra func(*flag.FlagSet)) (config.Config, *flag.FlagSet, error) {
	fs := flag.NewFlagSet("phonefleet "+c.words, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() { _ = printHelp(out, c) }
	if extra != nil {
		extra(fs)
	}
	cfg, err := config.Load(fs, args, nil)
	if err != nil && !errors.Is(err, flag.ErrHelp) && strings.HasPrefix(err.Error(), "flag provided but not defined") {
		return cfg, fs, usageError{fmt.Sprintf("%v\n\n%s", err, c.help)}
	}
	return cfg, fs, err
}

// versionCmd runs `phonefleet version`.
func versionCmd(_ context.Context, c cliCommand, args []string, out io.Writer) error {
	if len(args) > 0 {
		return usageError{c.help}
	}
	_, err := fmt.Fprintln(out, "phonefleet", service.Version)
	return err
}
