package sim

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestNetworkProxySettingIsKeptAndUsed: the setting is refused without a
// host or port, survives a save and restore, is shown by Settings and used
// by the browser for loopback pages too (the proxy answers 407 here: the
// page says so); without it, a loopback page is fetched directly where the
// host allows it, and made up where it does not.
func TestNetworkProxySettingIsKeptAndUsed(t *testing.T) {
	p, err := New(DefaultModel, "net-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.SetNetworkProxy(&NetworkProxy{Host: "", Port: 1}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("no host: %v", err)
	}
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusProxyAuthRequired)
	}))
	defer refusing.Close()
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "<title>Direct</title><p>body text</p>")
	}))
	defer page.Close()
	host, port := refusing.Listener.Addr().String(), 0
	fmt.Sscanf(host[len("127.0.0.1:"):], "%d", &port)
	if err := p.SetNetworkProxy(&NetworkProxy{Host: "127.0.0.1", Port: port, Username: "u", Password: "p"}); err != nil {
		t.Fatal(err)
	}
	st, _ := p.State()
	q, err := Restore(DefaultModel, st)
	if err != nil {
		t.Fatal(err)
	}
	q.AllowDirectLoopback(true)
	if got := q.NetworkProxySetting(); got == nil || got.Addr() != host || got.Username != "u" {
		t.Fatalf("restored setting %+v; want %s", got, host)
	}
	q.mu.Lock()
	summary := q.proxySummary()
	q.navigate(page.URL + "/x")
	through := q.page(page.URL + "/x")
	q.mu.Unlock()
	if summary != host || through.title != "Proxy authentication required" {
		t.Fatalf("with the proxy: Settings %q, page %q", summary, through.title)
	}
	if err := q.SetNetworkProxy(nil); err != nil {
		t.Fatal(err)
	}
	q.mu.Lock()
	q.navigate(page.URL + "/y")
	direct := q.page(page.URL + "/y")
	made := q.page("https://example.com")
	q.mu.Unlock()
	if direct.title != "Direct" || len(direct.paras) != 1 || direct.paras[0] != "body text" || made.title != "Example — Home" {
		t.Fatalf("direct: %+v; made up: %q", direct, made.title)
	}
	// A host that does not allow it: no proxy, no network, even for loopback.
	q.AllowDirectLoopback(false)
	q.mu.Lock()
	q.navigate(page.URL + "/z")
	invented := q.page(page.URL + "/z")
	q.mu.Unlock()
	if invented.title == "Direct" {
		t.Fatal("without a proxy and without leave, the browser reached a loopback page")
	}
}
