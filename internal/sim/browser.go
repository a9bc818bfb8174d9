package sim

import (
	"fmt"
	"hash/fnv"
	"image"
	"image/color"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"
)

// webPage is a page the browser "loads": everything on it is derived from
// its URL, so the same address always shows the same page and nothing goes
// over the network.
type webPage struct {
	title  string
	host   string
	paras  []string
	links  []webLink
	failed bool
}

type webLink struct{ text, url string }

var vocabulary = strings.Fields(`phone fleet device screen signal garden river morning quiet
network station market lantern harbour window coffee journey pattern ocean forest city
update battery music letter paper window winter summer bridge tower island mountain
record story picture camera travel recipe bakery bicycle engine rocket planet orbit
library lesson number answer question silver copper golden simple careful bright
gentle rapid steady modern ancient local global open hidden small large early late
builds carries follows shows keeps finds opens reads writes draws measures tests`)

// rng is splitmix64: a tiny deterministic generator seeded from the URL.
type rng uint64

func (r *rng) next() uint64 {
	*r += 0x9e3779b97f4a7c15
	z := uint64(*r)
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func (r *rng) intn(n int) int { return int(r.next() % uint64(n)) }

func (r *rng) sentence() string {
	n := 7 + r.intn(8)
	words := make([]string, n)
	for i := range words {
		words[i] = vocabulary[r.intn(len(vocabulary))]
	}
	return capitalize(strings.Join(words, " ")) + "."
}

func capitalize(s string) string {
	r, size := utf8.DecodeRuneInString(s)
	if size == 0 {
		return s
	}
	return string(unicode.ToUpper(r)) + s[size:]
}

// normalizeURL turns what was typed into an address: a bare host gets
// https://, and anything that does not look like an address becomes a
// search.
func normalizeURL(in string) string {
	s := strings.TrimSpace(in)
	if s == "" {
		return ""
	}
	if strings.Contains(s, " ") || (!strings.Contains(s, ".") && !strings.Contains(s, "://") && s != "localhost") {
		return "https://search.example/search?q=" + url.QueryEscape(s)
	}
	if !strings.Contains(s, "://") {
		s = "https://" + s
	}
	return s
}

func slug(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
	}
	out := strings.Trim(b.String(), "-")
	if out == "" {
		return "page"
	}
	return out
}

// pageFor renders an address into a page.
func pageFor(raw string) webPage {
	if raw == "" {
		return webPage{title: "Start page", paras: []string{
			"Type a web address or a search into the bar above, then press ENTER. Pages are made up inside the phone from their address, so every visit shows the same page.",
		}, links: []webLink{
			{"example.com", "https://example.com"},
			{"news.example/today", "https://news.example/today"},
			{"wiki.example/Phone", "https://wiki.example/Phone"},
		}}
	}
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return webPage{failed: true, title: "This site can't be reached", host: raw, paras: []string{
			"The address " + raw + " is not a web address the browser can open.", "ERR_INVALID_URL"}}
	}
	host := strings.ToLower(u.Hostname())
	if host == "invalid" || strings.HasSuffix(host, ".invalid") {
		return webPage{failed: true, title: "This site can't be reached", host: host, paras: []string{
			host + "'s server IP address could not be found.", "ERR_NAME_NOT_RESOLVED"}}
	}
	h := fnv.New64a()
	h.Write([]byte(raw))
	r := rng(h.Sum64())
	site := capitalize(strings.Split(strings.TrimPrefix(host, "www."), ".")[0])
	pg := webPage{host: host}
	if host == "search.example" {
		q := u.Query().Get("q")
		pg.title = "Results for “" + q + "”"
		pg.paras = []string{"About 3 results (simulated search).", r.sentence() + " " + r.sentence()}
		s := slug(q)
		pg.links = []webLink{
			{capitalize(q) + " — Wiki", "https://wiki.example/" + s},
			{capitalize(q) + " in the news", "https://news.example/" + s},
			{s + ".example", "https://" + s + ".example"},
		}
		return pg
	}
	var segs []string
	for _, sgm := range strings.Split(u.Path, "/") {
		if sgm != "" {
			if un, err := url.PathUnescape(sgm); err == nil {
				sgm = un
			}
			segs = append(segs, capitalize(strings.ReplaceAll(sgm, "-", " ")))
		}
	}
	if len(segs) == 0 {
		pg.title = site + " — Home"
	} else {
		pg.title = strings.Join(segs, " / ") + " — " + site
	}
	pg.paras = append(pg.paras, fmt.Sprintf("Welcome to %s. This page lives at %s and was made inside the phone from its address, so it reads the same on every visit.", site, raw))
	for i := 0; i < 4; i++ {
		n := 2 + r.intn(3)
		var ss []string
		for j := 0; j < n; j++ {
			ss = append(ss, r.sentence())
		}
		pg.paras = append(pg.paras, strings.Join(ss, " "))
	}
	base := u.Scheme + "://" + u.Host
	for i := 0; i < 3; i++ {
		w := vocabulary[r.intn(len(vocabulary))]
		pg.links = append(pg.links, webLink{capitalize(w) + " on " + site, base + "/" + w})
	}
	return pg
}

// displayURL is the address as the bar shows it when not editing.
func displayURL(u string) string {
	return strings.TrimPrefix(strings.TrimPrefix(u, "https://"), "http://")
}

func (p *Phone) focusAddressBar() {
	b := &p.st.Browser
	p.st.Focus = focusBrowser
	b.Draft = b.URL
	b.SelectAll = b.URL != ""
}

func (p *Phone) navigate(to string) {
	b := &p.st.Browser
	b.History = append(b.History, histEntry{URL: b.URL, Scroll: b.Scroll})
	b.URL, b.Scroll = to, 0
	if p.fetchesOverNetwork(to) {
		b.Fetched = p.fetch(to)
	}
}

func (p *Phone) loadDraft() string {
	b := &p.st.Browser
	to := normalizeURL(b.Draft)
	if to == "" {
		return "nothing to load: the address bar is empty"
	}
	p.navigate(to)
	p.st.Focus, b.Draft, b.SelectAll = "", "", false
	return fmt.Sprintf("loaded %s (%s)", to, p.page(to).title)
}

func (p *Phone) browserBack() (string, bool) {
	b := &p.st.Browser
	if p.st.Focus == focusBrowser {
		p.st.Focus, b.Draft, b.SelectAll = "", "", false
		return "stopped editing the address", true
	}
	if len(b.History) == 0 {
		return "", false
	}
	last := b.History[len(b.History)-1]
	b.History = b.History[:len(b.History)-1]
	b.URL, b.Scroll = last.URL, last.Scroll
	return "went back to " + p.page(b.URL).title, true
}

func (p *Phone) browserView(c image.Rectangle) (*node, color.RGBA) {
	pal := p.palette()
	W := p.model.Width
	b := &p.st.Browser
	link := rgb(0x1a, 0x0d, 0xab)
	accent := rgb(0x1a, 0x73, 0xe8)
	if pal.dark {
		link, accent = rgb(0x8a, 0xb4, 0xf8), rgb(0x8a, 0xb4, 0xf8)
	}
	v := newNode(classFrame, PkgBrowser, "android:id/content", c)
	v.fill = pal.bg
	barB := c.Min.Y + p.d(168)
	bar := newNode(classFrame, PkgBrowser, PkgBrowser+":id/toolbar", image.Rect(0, c.Min.Y, W, barB))
	bar.fill = pal.surface

	editing := p.st.Focus == focusBrowser
	ur := image.Rect(p.d(32), c.Min.Y+p.d(24), W-p.d(32), barB-p.d(24))
	ub := newNode(classEdit, PkgBrowser, PkgBrowser+":id/url_bar", ur)
	ub.el.Hint = "Search or type web address"
	ub.el.Focusable, ub.el.Focused = true, editing
	ub.fill, ub.radius = pal.bg, ur.Dy()/2
	if pal.dark {
		ub.fill = pal.surface2
	}
	fk := p.face(fontRegular, 42)
	tb := &textBox{face: fk, col: pal.text, padX: p.d(48)}
	room := ur.Dx() - 2*p.d(48) - p.d(8)
	switch {
	case editing:
		ub.el.Text = b.Draft
		ub.stroke, ub.strokeW = accent, p.d(4)
		tb.lines = []string{ellipsizeStart(fk, b.Draft, room)}
		tb.cursor, tb.cursorCol = !b.SelectAll, accent
		if b.SelectAll {
			tb.selCol = pal.selected
		}
	case b.URL != "":
		ub.el.Text = displayURL(b.URL)
		tb.lines = []string{ellipsize(fk, displayURL(b.URL), room)}
	default:
		tb.lines, tb.col = []string{ub.el.Hint}, pal.text2
	}
	ub.txt = tb
	ub.onTap = func() (string, error) {
		if p.st.Focus == focusBrowser {
			if b.SelectAll {
				b.SelectAll = false
				return "placed the cursor at the end of the address", nil
			}
			return "the address bar already has focus", nil
		}
		p.focusAddressBar()
		return "focused the address bar", nil
	}
	bar.add(ub)
	v.add(bar)

	pg := p.page(b.URL)
	page := newNode(classWebView, PkgBrowser, PkgBrowser+":id/page", image.Rect(0, barB, W, c.Max.Y))
	page.el.Text = pg.title
	pad := p.d(56)
	tw := W - 2*pad
	titleFk, hostFk, textFk, linkFk := p.face(fontBold, 64), p.face(fontRegular, 36), p.face(fontRegular, 42), p.face(fontRegular, 44)
	titleLines := wrap(titleFk, pg.title, tw, 3)
	paraLines := make([][]string, len(pg.paras))
	total := p.d(56) + len(titleLines)*p.d(84) + p.d(16)
	if pg.host != "" {
		total += p.d(60)
	}
	total += p.d(24)
	for i, para := range pg.paras {
		paraLines[i] = wrap(textFk, para, tw, 0)
		total += len(paraLines[i])*p.d(62) + p.d(36)
	}
	total += len(pg.links)*p.d(104) + p.d(56)
	off := p.scroller(page, &b.Scroll, total, "the page")
	y := page.rect.Min.Y + p.d(56) - off
	titleCol := pal.text
	if pg.failed {
		titleCol = rgb(0xc5, 0x22, 0x1f)
	}
	t := newNode(classText, PkgBrowser, PkgBrowser+":id/page_title", image.Rect(pad, y, W-pad, y+len(titleLines)*p.d(84)))
	t.el.Text = pg.title
	t.txt = &textBox{lines: titleLines, face: titleFk, col: titleCol, valign: vTop, lineH: p.d(84)}
	page.add(t)
	y += len(titleLines)*p.d(84) + p.d(16)
	if pg.host != "" {
		page.add(newLabel(PkgBrowser, PkgBrowser+":id/page_host", pg.host, image.Rect(pad, y, W-pad, y+p.d(60)), hostFk, pal.text2, alignLeft, 0))
		y += p.d(60)
	}
	y += p.d(24)
	for i, lines := range paraLines {
		n := newNode(classText, PkgBrowser, PkgBrowser+":id/page_text", image.Rect(pad, y, W-pad, y+len(lines)*p.d(62)))
		n.el.Text = pg.paras[i]
		n.txt = &textBox{lines: lines, face: textFk, col: pal.text, valign: vTop, lineH: p.d(62)}
		page.add(n)
		y += len(lines)*p.d(62) + p.d(36)
	}
	for i, l := range pg.links {
		lw := min(measure(linkFk, l.text)+p.d(8), tw)
		n := newLabel(PkgBrowser, PkgBrowser+":id/page_link", l.text, image.Rect(pad, y, pad+lw, y+p.d(96)), linkFk, link, alignLeft, 0)
		n.key = fmt.Sprintf("link:%d", i)
		n.txt.underline = true
		to := l.url
		n.onTap = func() (string, error) {
			p.navigate(to)
			p.st.Focus, b.Draft, b.SelectAll = "", "", false
			return fmt.Sprintf("followed a link to %s (%s)", to, p.page(to).title), nil
		}
		page.add(n)
		y += p.d(104)
	}
	v.add(page)
	return v, pal.surface
}
