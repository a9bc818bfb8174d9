package sim

import (
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// NetworkProxy is the phone's network proxy setting (Settings › Network &
// internet › Proxy): the browser sends every page it loads through it, with
// the credentials as Proxy-Authorization Basic.
type NetworkProxy struct {
	Host     string `json:"host"`
	Port     int    `json:"port"`
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
}

// Addr is host:port.
func (n NetworkProxy) Addr() string { return net.JoinHostPort(n.Host, strconv.Itoa(n.Port)) }

// SetNetworkProxy sets the phone's network proxy (nil: none, the phone
// connects directly). It is a setting change applied under the lock, like
// any other input; the page already shown stays as it was.
func (p *Phone) SetNetworkProxy(n *NetworkProxy) error {
	if n != nil && (n.Host == "" || n.Port <= 0 || n.Port > 65535) {
		return fmt.Errorf("%w: a network proxy needs a host and a port 1-65535", ErrInvalidArgument)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if n != nil {
		c := *n
		n = &c
	}
	p.st.Settings.Proxy = n
	p.shown = shown{}
	p.pngHash, p.pngData = "", nil
	return nil
}

// NetworkProxySetting returns the phone's network proxy, nil when none.
func (p *Phone) NetworkProxySetting() *NetworkProxy {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.st.Settings.Proxy == nil {
		return nil
	}
	c := *p.st.Settings.Proxy
	return &c
}

// proxySummary is what Settings shows for the proxy row.
func (p *Phone) proxySummary() string {
	if n := p.st.Settings.Proxy; n != nil {
		return n.Addr()
	}
	return "None"
}

// fetchedPage is a page the browser really loaded over the network (through
// the phone's proxy, or directly from a loopback address), kept in the
// state so the screen renders the same after a restart.
type fetchedPage struct {
	URL    string `json:"url"`
	Title  string `json:"title"`
	Text   string `json:"text"`
	Status int    `json:"status"`
	Error  string `json:"error,omitempty"`
	Via    string `json:"via,omitempty"`
}

// AllowDirectLoopback lets the browser load loopback pages directly when
// no network proxy is set (the host's policy, not part of the state:
// local mode allows it).
func (p *Phone) AllowDirectLoopback(allow bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.directLoopback = allow
}

// fetchesOverNetwork says whether the browser loads raw from the network
// rather than making the page up: with a network proxy set, every http(s)
// address (the proxy decides where it may go); without, only loopback
// ones, and only where the host allows it (pages a test serves on this
// machine). Everything else is made up from its address as before.
func (p *Phone) fetchesOverNetwork(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return false
	}
	if p.st.Settings.Proxy != nil {
		return true
	}
	if !p.directLoopback {
		return false
	}
	h := u.Hostname()
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

var (
	titleRe = regexp.MustCompile(`(?is)<title[^>]*>(.*?)</title>`)
	tagRe   = regexp.MustCompile(`(?s)<[^>]*>`)
	spaceRe = regexp.MustCompile(`\s+`)
)

// fetch loads raw over the network, through the proxy when one is set.
// Called under the lock: the phone is busy while its page loads, as a
// browser's tab is.
func (p *Phone) fetch(raw string) *fetchedPage {
	fp := &fetchedPage{URL: raw}
	tr := &http.Transport{Proxy: nil, DisableKeepAlives: true}
	if n := p.st.Settings.Proxy; n != nil {
		pu := &url.URL{Scheme: "http", Host: n.Addr()}
		if n.Username != "" {
			pu.User = url.UserPassword(n.Username, n.Password)
		}
		tr.Proxy = http.ProxyURL(pu)
		fp.Via = n.Addr()
	}
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(raw)
	if err != nil {
		fp.Error = "ERR_CONNECTION_FAILED"
		var ue *url.Error
		if errors.As(err, &ue) && strings.Contains(ue.Err.Error(), "Proxy Authentication Required") {
			fp.Error, fp.Status = "ERR_PROXY_AUTH_REQUESTED", http.StatusProxyAuthRequired
		}
		return fp
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 256<<10))
	fp.Status = resp.StatusCode
	switch {
	case resp.StatusCode == http.StatusProxyAuthRequired:
		fp.Error = "ERR_PROXY_AUTH_REQUESTED"
	case resp.StatusCode >= 400:
		fp.Error = "HTTP_" + strconv.Itoa(resp.StatusCode)
	}
	body := string(b)
	if m := titleRe.FindStringSubmatch(body); m != nil {
		fp.Title = strings.TrimSpace(html.UnescapeString(spaceRe.ReplaceAllString(m[1], " ")))
		body = strings.Replace(body, m[0], "", 1)
	}
	fp.Text = strings.TrimSpace(html.UnescapeString(spaceRe.ReplaceAllString(tagRe.ReplaceAllString(body, " "), " ")))
	if len(fp.Text) > 2000 {
		fp.Text = fp.Text[:2000]
	}
	return fp
}

// page is the page shown at an address: the one fetched for it, or one
// made up from it.
func (p *Phone) page(raw string) webPage {
	f := p.st.Browser.Fetched
	if f == nil || f.URL != raw {
		return pageFor(raw)
	}
	host := raw
	if u, err := url.Parse(raw); err == nil {
		host = u.Host
	}
	if f.Error != "" {
		title := "This site can't be reached"
		if f.Status == http.StatusProxyAuthRequired {
			title = "Proxy authentication required"
		}
		return webPage{failed: true, title: title, host: host, paras: []string{"The page " + raw + " could not be loaded.", f.Error}}
	}
	pg := webPage{title: f.Title, host: host}
	if pg.title == "" {
		pg.title = host
	}
	if f.Text != "" {
		pg.paras = []string{f.Text}
	}
	if f.Via != "" {
		pg.paras = append(pg.paras, "Loaded through the proxy "+f.Via+".")
	}
	return pg
}
