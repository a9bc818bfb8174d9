package mcp_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"phonefleet/commands"
	"phonefleet/commands/apps"
	"phonefleet/commands/keys"
	"phonefleet/commands/webhooks"
	"phonefleet/domain"
	"phonefleet/eventstore"
	httpapi "phonefleet/http"
	"phonefleet/http/contract"
	"phonefleet/internal/identity"
	"phonefleet/mcp"
	"phonefleet/projections"
	"phonefleet/testutil"
	"phonefleet/testutil/fleettest"
)

// service is the real HTTP edge (httpapi.New) over a running fleet of sim
// phones, the API key store and webhooks, with the tool surface mounted at
// /mcp: what `phonefleet serve` wires, on small pools.
type service struct {
	fleet *fleettest.Env
	url   string // base URL of the running edge
	mint  keys.MintAPIKeyHandler
}

// startService starts the edge on 127.0.0.1 with devices sim phones.
func startService(t testing.TB, devices int) *service {
	t.Helper()
	return startServiceWith(t, fleettest.Options{Devices: devices, WaitForReceipts: true})
}

// startServiceWith starts the edge over a fleet started with opts.
func startServiceWith(t testing.TB, opts fleettest.Options) *service {
	t.Helper()
	return startServiceEvolving(t, opts, nil)
}

// startServiceEvolving starts the edge over a fleet started with opts, its
// tool surface and edge given ev as their contract's evolution (nil: the
// committed changelog and the production registry).
func startServiceEvolving(t testing.TB, opts fleettest.Options, ev *contract.Evolution) *service {
	t.Helper()
	fe := fleettest.Start(t, opts)
	ctx := testutil.Context(t)

	// Keys and webhooks get a pool of their own, beside the fleet's.
	cfg, err := pgxpool.ParseConfig(fe.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	store := eventstore.New(pool, eventstore.WithUpcaster(domain.Events))
	runner, err := projections.NewRunner(store, fleettest.Quiet, []projections.Projection{projections.APIKeys{}, projections.Webhooks{}, projections.Apps{}},
		projections.WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := runner.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = runner.Run(runCtx); close(done) }()

	pepper := make([]byte, 32)
	_, _ = rand.Read(pepper)
	hasher, err := identity.NewHasher(pepper)
	if err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	box, err := domain.NewSecretBox(key)
	if err != nil {
		t.Fatal(err)
	}
	base := webhooks.Webhooks{Store: store, Box: box, ReadModels: testutil.ReadModels{RM: runner}}
	app := commands.NewApplication(commands.Capabilities{Fleet: fe.Fleet, Runs: fe.Runs,
		Webhooks: &webhooks.Capability{Webhooks: base, Queries: projections.WebhookQueries{DB: pool}},
		Apps:     apps.New(apps.Config{Store: store, Devices: fe.Fleet, ReadModels: testutil.ReadModels{RM: runner}})})
	tools, err := mcp.New(mcp.Deps{App: &app, Mode: "local", Contract: ev})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tools.Close() })
	auth := &identity.Authenticator{Mode: "local", LocalOrgID: fe.OrgID,
		Keys: &identity.KeyVerifier{Lookup: projections.APIKeyReader{DB: pool}, Hasher: hasher}}
	edge := httpapi.New(httpapi.Deps{Logger: fleettest.Quiet, Mode: "local", Auth: auth, LocalOrgID: fe.OrgID,
		App: &app, MCP: tools, Contract: ev})
	ts := httptest.NewServer(edge.Handler())
	// Cleanups run last-in first-out: the server stops before the runner
	// and the pool, and the fleet (registered first) after them.
	t.Cleanup(func() { stop(); <-done; pool.Close() })
	t.Cleanup(ts.Close)
	return &service{fleet: fe, url: ts.URL,
		mint: keys.MintAPIKeyHandler{APIKeyDeps: keys.APIKeyDeps{Store: store, ReadModels: runner}, Hasher: hasher}}
}

// key mints an API key of the local organisation holding scopes.
func (s *service) key(t testing.TB, scopes ...domain.Scope) string {
	t.Helper()
	k, err := s.mint.Handle(testutil.Context(t), keys.MintAPIKey{Auth: s.fleet.Auth, Name: "mcp test", Scopes: scopes})
	if err != nil {
		t.Fatal(err)
	}
	return k.Token
}

// result is one tools/call answer, whichever client made the call.
type result struct {
	isError bool
	texts   []string
	images  [][]byte // decoded images (PNG, or JPEG when asked for)
	// structured is the result's structuredContent (must stay empty on
	// errors).
	structured any
	// meta is the result's _meta.
	meta map[string]any
}

// json decodes the last text block into v.
func (r result) json(t *testing.T, v any) {
	t.Helper()
	if len(r.texts) == 0 {
		t.Fatal("the result has no text block")
	}
	if err := json.Unmarshal([]byte(r.texts[len(r.texts)-1]), v); err != nil {
		t.Fatalf("the text block is not JSON: %v\n%s", err, r.texts[len(r.texts)-1])
	}
}

// agent is an MCP client session of one SDK and protocol era.
type agent interface {
	serverInfo() (name, version string)
	protocolVersion() string
	tools(t *testing.T) []sdkTool
	// call calls a tool; err is a protocol-level error (JSON-RPC or HTTP).
	call(t *testing.T, name string, args map[string]any) (result, error)
}

// sdkTool is a listed tool as a client sees it.
type sdkTool struct {
	Name        string
	Description string
	// Meta is the definition's _meta.
	Meta        map[string]any
	ReadOnly    *bool
	Destructive *bool
	// OutputSchema is the declared output schema as the client decoded it.
	OutputSchema any
}

// client names one way to connect: an SDK and the protocol era it speaks.
type client struct {
	name    string
	connect func(t *testing.T, url, token string) agent
}

// clients are the four ways every end-to-end test connects: mcp-go's
// client and the official go-sdk client, each on the session-based
// 2025-11-25 revision and on the sessionless 2026-07-28 revision.
var clients = []client{
	{"mcp-go/2025-11-25", func(t *testing.T, url, token string) agent { return connectMCPGo(t, url, token, "2025-11-25") }},
	{"mcp-go/2026-07-28", func(t *testing.T, url, token string) agent { return connectMCPGo(t, url, token, "") }},
	{"go-sdk/2025-11-25", func(t *testing.T, url, token string) agent { return connectSDK(t, url, token, "2025-11-25") }},
	{"go-sdk/2026-07-28", func(t *testing.T, url, token string) agent { return connectSDK(t, url, token, "") }},
}

type mcpGoAgent struct {
	c    *mcpclient.Client
	init *mcpgo.InitializeResult
}

func connectMCPGo(t *testing.T, url, token, version string) agent {
	t.Helper()
	var opts []transport.StreamableHTTPCOption
	if token != "" {
		opts = append(opts, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}))
	}
	tr, err := transport.NewStreamableHTTP(url+"/mcp", opts...)
	if err != nil {
		t.Fatal(err)
	}
	var copts []mcpclient.ClientOption
	if version != "" {
		copts = append(copts, mcpclient.WithProtocolVersion(version))
	}
	c := mcpclient.NewClient(tr, copts...)
	ctx, cancel := context.WithTimeout(testutil.Context(t), 30*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	req := mcpgo.InitializeRequest{}
	req.Params.ClientInfo = mcpgo.Implementation{Name: "phonefleet-test", Version: "1"}
	init, err := c.Initialize(ctx, req)
	if err != nil {
		t.Fatalf("initialize: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &mcpGoAgent{c: c, init: init}
}

func (a *mcpGoAgent) serverInfo() (string, string) {
	return a.init.ServerInfo.Name, a.init.ServerInfo.Version
}
func (a *mcpGoAgent) protocolVersion() string { return a.c.ProtocolVersion() }

func (a *mcpGoAgent) tools(t *testing.T) []sdkTool {
	t.Helper()
	res, err := a.c.ListTools(testutil.Context(t), mcpgo.ListToolsRequest{})
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	var out []sdkTool
	for _, tl := range res.Tools {
		st := sdkTool{Name: tl.Name, Description: tl.Description, ReadOnly: tl.Annotations.ReadOnlyHint, Destructive: tl.Annotations.DestructiveHint}
		if tl.Meta != nil {
			st.Meta = tl.Meta.AdditionalFields
		}
		if tl.OutputSchema.Type != "" {
			// mcp-go decodes the schema into its struct (type, properties,
			// required, additionalProperties, $defs): what its users see.
			raw, err := json.Marshal(tl.OutputSchema)
			if err != nil {
				t.Fatalf("tools/list: %s: output schema: %v", tl.Name, err)
			}
			var v any
			_ = json.Unmarshal(raw, &v)
			st.OutputSchema = v
		}
		out = append(out, st)
	}
	return out
}

func (a *mcpGoAgent) call(t *testing.T, name string, args map[string]any) (result, error) {
	t.Helper()
	req := mcpgo.CallToolRequest{}
	req.Params.Name, req.Params.Arguments = name, args
	ctx, cancel := context.WithTimeout(testutil.Context(t), 60*time.Second)
	defer cancel()
	res, err := a.c.CallTool(ctx, req)
	if err != nil {
		return result{}, err
	}
	out := result{isError: res.IsError, structured: res.StructuredContent}
	if res.Meta != nil {
		out.meta = res.Meta.AdditionalFields
	}
	for _, c := range res.Content {
		switch c := c.(type) {
		case mcpgo.TextContent:
			out.texts = append(out.texts, c.Text)
		case mcpgo.ImageContent:
			b, err := base64.StdEncoding.DecodeString(c.Data)
			if err != nil || c.MIMEType != "image/png" && c.MIMEType != "image/jpeg" {
				t.Fatalf("image block: %v, mime %q", err, c.MIMEType)
			}
			out.images = append(out.images, b)
		default:
			t.Fatalf("unexpected content block %T", c)
		}
	}
	return out, nil
}

type sdkAgent struct {
	s *sdk.ClientSession
}

// bearer adds the credential to every request of the go-sdk client.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.token != "" {
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func connectSDK(t *testing.T, url, token, version string) agent {
	t.Helper()
	c := sdk.NewClient(&sdk.Implementation{Name: "phonefleet-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(testutil.Context(t), 30*time.Second)
	defer cancel()
	s, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: url + "/mcp", HTTPClient: &http.Client{Transport: bearer{token}},
		MaxRetries: -1}, &sdk.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return &sdkAgent{s: s}
}

func (a *sdkAgent) serverInfo() (string, string) {
	info := a.s.InitializeResult().ServerInfo
	if info == nil {
		return "", ""
	}
	return info.Name, info.Version
}
func (a *sdkAgent) protocolVersion() string { return a.s.InitializeResult().ProtocolVersion }

func (a *sdkAgent) tools(t *testing.T) []sdkTool {
	t.Helper()
	res, err := a.s.ListTools(testutil.Context(t), nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	var out []sdkTool
	for _, tl := range res.Tools {
		st := sdkTool{Name: tl.Name, Description: tl.Description, Meta: tl.Meta, OutputSchema: tl.OutputSchema}
		if tl.Annotations != nil {
			ro := tl.Annotations.ReadOnlyHint
			st.ReadOnly, st.Destructive = &ro, tl.Annotations.DestructiveHint
		}
		out = append(out, st)
	}
	return out
}

func (a *sdkAgent) call(t *testing.T, name string, args map[string]any) (result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(testutil.Context(t), 60*time.Second)
	defer cancel()
	res, err := a.s.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		return result{}, err
	}
	out := result{isError: res.IsError, structured: res.StructuredContent, meta: res.Meta}
	for _, c := range res.Content {
		switch c := c.(type) {
		case *sdk.TextContent:
			out.texts = append(out.texts, c.Text)
		case *sdk.ImageContent:
			if c.MIMEType != "image/png" && c.MIMEType != "image/jpeg" {
				t.Fatalf("image block of type %q", c.MIMEType)
			}
			out.images = append(out.images, c.Data)
		default:
			t.Fatalf("unexpected content block %T", c)
		}
	}
	return out, nil
}

// mustCall calls a tool and fails the test on a protocol error or a failed
// result.
func mustCall(t *testing.T, a agent, name string, args map[string]any) result {
	t.Helper()
	r, err := a.call(t, name, args)
	if err != nil {
		t.Fatalf("%s: protocol error %v", name, err)
	}
	if r.isError {
		t.Fatalf("%s: got a failed result %v; want success", name, r.texts)
	}
	return r
}

// envelope is the tool error envelope of spec 2.3.
type envelope map[string]any

// mustFail calls a tool that must fail and returns its error envelope,
// checking its shape: isError, the envelope as JSON in the one text block,
// nothing in structuredContent.
func mustFail(t *testing.T, a agent, name string, args map[string]any) envelope {
	t.Helper()
	r, err := a.call(t, name, args)
	if err != nil {
		t.Fatalf("%s: protocol error %v; want a failed result", name, err)
	}
	if !r.isError {
		t.Fatalf("%s: got success %v; want isError", name, r.texts)
	}
	if r.structured != nil {
		t.Errorf("%s: got structuredContent %v on a failure; want none", name, r.structured)
	}
	if len(r.texts) != 1 {
		t.Fatalf("%s: got %d text blocks; want 1", name, len(r.texts))
	}
	var env envelope
	if err := json.Unmarshal([]byte(r.texts[0]), &env); err != nil {
		t.Fatalf("%s: the error text is not the JSON envelope: %v\n%s", name, err, r.texts[0])
	}
	for _, k := range []string{"name", "code", "message", "retryable"} {
		if _, ok := env[k]; !ok {
			t.Errorf("%s: envelope %v has no %q", name, env, k)
		}
	}
	if env["name"] != name {
		t.Errorf("%s: got envelope name %v; want %s", name, env["name"], name)
	}
	if _, ok := env["retryable"].(bool); !ok {
		t.Errorf("%s: got retryable %v; want a boolean", name, env["retryable"])
	}
	code, _ := env["code"].(string)
	if !isMCPCode(code) {
		t.Errorf("%s: got code %q; want one of the 18 MCP codes", name, code)
	}
	return env
}

func isMCPCode(code string) bool {
	for _, c := range domain.MCPCodes {
		if string(c) == code {
			return true
		}
	}
	return false
}

// isMethodNotFound reports whether err is the JSON-RPC error -32601 as
// either client surfaces it.
func isMethodNotFound(err error) bool {
	var wire *jsonrpc.Error
	if errors.As(err, &wire) {
		return wire.Code == jsonrpc.CodeMethodNotFound
	}
	return errors.Is(err, mcpgo.ErrMethodNotFound)
}
