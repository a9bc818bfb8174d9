package service

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"

	"phonefleet/projections"
	"phonefleet/testutil"
)

// heldAudit is the audit feed projection as a second process rebuilding
// it sees it (as `phonefleet projections rebuild audit_feed` would run):
// it applies its first batch, then holds the next until released, so the
// rebuild stays under way while the test looks at it.
type heldAudit struct {
	projections.Audit
	mu      sync.Mutex
	applied int
	held    chan struct{}
	release chan struct{}
	once    sync.Once
}

func (p *heldAudit) QueueApply(b *pgx.Batch, schema string, s projections.Span) {
	p.mu.Lock()
	p.applied++
	first := p.applied == 1
	p.mu.Unlock()
	if !first {
		// Tell the test, unless it has been told and not looked yet; once
		// released, the batches (as many as the feed then holds) go
		// straight through.
		select {
		case p.held <- struct{}{}:
		default:
		}
		<-p.release
	}
	p.Audit.QueueApply(b, schema, s)
}

func (p *heldAudit) open() { p.once.Do(func() { close(p.release) }) }

// consoleProjection is a row of the operators page as the test reads it.
type consoleProjection struct {
	Name     string  `json:"name"`
	State    string  `json:"state"`
	Version  string  `json:"version"`
	Lag      string  `json:"lag"`
	Progress float64 `json:"progress"`
	Label    string  `json:"label"`
}

// readProjections is the operators page's table, row by row.
const readProjections = `[...document.querySelectorAll('table.projections tbody tr')].map((r) => ({
	name: r.dataset.projection, state: r.dataset.state, version: r.children[1].textContent, lag: r.children[3].textContent,
	progress: r.querySelector('progress') ? r.querySelector('progress').value : -1,
	label: r.querySelector('.rebuild-label') ? r.querySelector('.rebuild-label').textContent : '' }))`

// TestConsoleOperatorsShowsTheProjections runs the service in local mode
// and opens the operators page in a real headless Chromium: it lists
// every projection the service runs, each live at version 1 and caught
// up, as GET /v1/operators/projections says. Then another process
// rebuilds the audit feed (a second runner on the same database, held
// after its first batch): after Refresh the page shows audit_feed
// rebuilding, version 2 with its progress bar at the share of the feed
// read; once the rebuild finishes and takes over, the page shows
// version 2 live. Screenshots: the page, the rebuild, at 1280×800 and at
// a phone's width.
func TestConsoleOperatorsShowsTheProjections(t *testing.T) {
	dir := t.TempDir()
	a, base := startApp(t, map[string]string{
		"DATABASE_URL": testutil.DatabaseURL(t), "SERVICE_ADDR": "127.0.0.1:0",
		"SERVICE_DATA_DIR": filepath.Join(dir, "data"), "SERVICE_SIM_DEVICES": "1",
	})
	api := newAdminAPI(t, a, base)
	names := a.runner.Names()

	ctx := testutil.Browser(t)
	wait, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	admDo(t, wait, "open the operators page",
		chromedp.Navigate(base+"/#/operators"),
		chromedp.WaitVisible(chromedp.CSS(`table.projections tbody tr`)))
	// Every projection is listed, live at version 1 once caught up (the
	// sim phone's registration may still be on its way).
	admPoll[bool](t, wait, "every projection caught up", `(() => {
		const rows = [...document.querySelectorAll('table.projections tbody tr')];
		if (rows.some((r) => r.children[3].textContent !== '0')) { document.querySelector('.toolbar button').click(); return false; }
		return rows.length > 0; })()`)
	var rows []consoleProjection
	if err := json.Unmarshal([]byte(admEval[string](t, wait, `JSON.stringify(`+readProjections+`)`)), &rows); err != nil {
		t.Fatal(err)
	}
	var shown []string
	for _, r := range rows {
		shown = append(shown, r.Name)
		if r.State != "live" || r.Version != "1" || r.Lag != "0" || r.Progress != -1 {
			t.Errorf("row %+v; want live at version 1, caught up, no rebuild", r)
		}
	}
	if !slices.Equal(shown, names) {
		t.Errorf("the page lists %v; want every projection the service runs, in its order: %v", shown, names)
	}
	var answer struct {
		Projections []struct{ Name string } `json:"projections"`
	}
	api.json("GET", "/v1/operators/projections", "", "", 200, &answer)
	if len(answer.Projections) != len(names) {
		t.Errorf("the API lists %d projections; the page %d", len(answer.Projections), len(rows))
	}
	if summary := admEval[string](t, wait, `document.getElementById('projections-summary').textContent`); !strings.Contains(summary, "every live version caught up") {
		t.Errorf("the summary says %q; want every live version caught up", summary)
	}
	admCheckA11y(t, wait, "operators page")
	testutil.Screenshot(t, ctx, "operators")

	// Another process rebuilds the audit feed, held after one batch.
	held := &heldAudit{held: make(chan struct{}, 1), release: make(chan struct{})}
	other, err := projections.NewRunner(a.store, slog.New(slog.DiscardHandler), []projections.Projection{held}, projections.WithBatchSize(1))
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(testutil.Context(t))
	rebuilt := make(chan struct{})
	var rebuildErr error
	go func() { rebuildErr = other.Rebuild(rctx, projections.AuditName, nil); close(rebuilt) }()
	t.Cleanup(func() { held.open(); stop(); <-rebuilt })
	select {
	case <-held.held:
	case <-rebuilt:
		t.Fatalf("the rebuild ended before its second batch: %v", rebuildErr)
	case <-time.After(time.Minute):
		t.Fatal("the rebuild never reached its second batch")
	}
	var head, first int64
	if err := a.db.Pool.QueryRow(testutil.Context(t), `SELECT max(position), min(position) FROM events`).Scan(&head, &first); err != nil {
		t.Fatal(err)
	}
	audit := `tr[data-projection="` + projections.AuditName + `"]`
	admDo(t, wait, "refresh during the rebuild",
		chromedp.Click(chromedp.CSS(`.toolbar button`)),
		chromedp.WaitVisible(chromedp.CSS(audit+`[data-state=rebuilding] progress`)))
	var during consoleProjection
	if err := json.Unmarshal([]byte(admEval[string](t, wait, `JSON.stringify(`+readProjections+`.find((r) => r.name === 'audit_feed'))`)), &during); err != nil {
		t.Fatal(err)
	}
	// The service may have written more since: the share read is more
	// than nothing and at most first/head.
	if during.Version != "1" || during.Progress <= 0 || during.Progress > float64(first)/float64(head) || !strings.HasPrefix(during.Label, "Version 2: ") {
		t.Errorf("during the rebuild the row is %+v; want version 1 live, version 2 built with progress in (0, %v]", during, float64(first)/float64(head))
	}
	if summary := admEval[string](t, wait, `document.getElementById('projections-summary').textContent`); !strings.Contains(summary, "1 rebuilding") {
		t.Errorf("the summary says %q; want 1 rebuilding", summary)
	}
	admCheckA11y(t, wait, "operators page, rebuilding")
	testutil.Screenshot(t, ctx, "operators-rebuilding")
	admPhoneScreenshot(t, wait, "operators-phone")

	held.open()
	<-rebuilt
	if rebuildErr != nil {
		t.Fatalf("the rebuild: %v", rebuildErr)
	}
	admPoll[bool](t, wait, "audit_feed live at version 2", `(() => {
		const r = document.querySelector('`+audit+`');
		if (r && r.dataset.state === 'live' && r.children[1].textContent === '2' && !r.querySelector('progress')) return true;
		document.querySelector('.toolbar button').click();
		return false; })()`)

	if errs := testutil.BrowserErrors(ctx); len(errs) > 0 {
		t.Errorf("the page threw: %q", errs)
	}
}
