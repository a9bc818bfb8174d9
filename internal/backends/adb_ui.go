package backends

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/xml"
	"fmt"
	"strconv"
	"strings"

	"phonefleet/domain"
)

// uiNode is one <node> of a `uiautomator dump`.
type uiNode struct {
	Index         string   `xml:"index,attr"`
	Text          string   `xml:"text,attr"`
	ResourceID    string   `xml:"resource-id,attr"`
	Class         string   `xml:"class,attr"`
	Package       string   `xml:"package,attr"`
	ContentDesc   string   `xml:"content-desc,attr"`
	Hint          string   `xml:"hint,attr"`
	Checkable     string   `xml:"checkable,attr"`
	Checked       string   `xml:"checked,attr"`
	Clickable     string   `xml:"clickable,attr"`
	Enabled       string   `xml:"enabled,attr"`
	Focusable     string   `xml:"focusable,attr"`
	Focused       string   `xml:"focused,attr"`
	Scrollable    string   `xml:"scrollable,attr"`
	LongClickable string   `xml:"long-clickable,attr"`
	Password      string   `xml:"password,attr"`
	Bounds        string   `xml:"bounds,attr"`
	Nodes         []uiNode `xml:"node"`
}

type uiHierarchy struct {
	XMLName xml.Name `xml:"hierarchy"`
	Nodes   []uiNode `xml:"node"`
}

// parseUIDump maps the XML `uiautomator dump` prints onto the element
// model the sim produces. Text after the document (the tool's "UI
// hierarchy dumped to" line) is ignored. A dump with several top-level
// nodes (several windows) gets a root spanning the screen (w×h) that holds
// them. Refs are derived from each node's path of identities (class and
// resource id, or sibling position when it has none), so the same screen
// gives the same refs.
func parseUIDump(b []byte, w, h int) (domain.UIElement, error) {
	start := bytes.Index(b, []byte("<hierarchy"))
	end := bytes.LastIndex(b, []byte("</hierarchy>"))
	if start < 0 {
		if bytes.Contains(b, []byte("<hierarchy")) || bytes.HasSuffix(bytes.TrimSpace(b), []byte("/>")) {
			return domain.UIElement{}, fmt.Errorf("ui dump: truncated")
		}
		return domain.UIElement{}, fmt.Errorf("ui dump: no <hierarchy> in the output")
	}
	if end < 0 {
		// An empty hierarchy is written <hierarchy rotation="0"/>.
		if e := bytes.Index(b[start:], []byte("/>")); e >= 0 && !bytes.Contains(b[start:start+e], []byte("<node")) {
			return domain.UIElement{Ref: refOf("", "hierarchy", "#0"), Class: "hierarchy", Bounds: [4]int{0, 0, w, h}, Enabled: true}, nil
		}
		return domain.UIElement{}, fmt.Errorf("ui dump: truncated")
	}
	var hier uiHierarchy
	if err := xml.Unmarshal(b[start:end+len("</hierarchy>")], &hier); err != nil {
		return domain.UIElement{}, fmt.Errorf("ui dump: %w", err)
	}
	if len(hier.Nodes) == 1 {
		return convertNode(hier.Nodes[0], "", "#0")
	}
	root := domain.UIElement{Ref: refOf("", "hierarchy", "#0"), Class: "hierarchy", Bounds: [4]int{0, 0, w, h}, Enabled: true}
	var err error
	root.Children, err = convertChildren(hier.Nodes, root.Ref)
	return root, err
}

// convertChildren converts sibling nodes. A node's key among its
// siblings is its resource id and how many earlier siblings share it, or
// its position when it has none: an id names the element wherever it
// sits, so content inserted before it does not move its ref.
func convertChildren(nodes []uiNode, parentRef string) ([]domain.UIElement, error) {
	var out []domain.UIElement
	seen := map[string]int{}
	for i, n := range nodes {
		key := "#" + strconv.Itoa(i)
		if n.ResourceID != "" {
			id := n.Class + "\x00" + n.ResourceID
			key = n.ResourceID + "#" + strconv.Itoa(seen[id])
			seen[id]++
		}
		c, err := convertNode(n, parentRef, key)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func convertNode(n uiNode, parentRef, key string) (domain.UIElement, error) {
	b, err := parseBounds(n.Bounds)
	if err != nil {
		return domain.UIElement{}, err
	}
	e := domain.UIElement{
		Class: n.Class, Package: n.Package, ResourceID: n.ResourceID, Text: n.Text, Hint: n.Hint,
		ContentDesc: n.ContentDesc, Bounds: b,
		Clickable: n.Clickable == "true", LongClickable: n.LongClickable == "true", Focusable: n.Focusable == "true",
		Focused: n.Focused == "true", Enabled: n.Enabled != "false", Checkable: n.Checkable == "true",
		Checked: n.Checked == "true", Scrollable: n.Scrollable == "true", Password: n.Password == "true",
	}
	e.Ref = refOf(parentRef, n.Class, key)
	e.Children, err = convertChildren(n.Nodes, e.Ref)
	return e, err
}

// refOf derives an element's ref from its parent's, its class and its key
// among its siblings: "e" and six base-36 digits.
func refOf(parentRef, class, key string) string {
	h := sha256.New()
	h.Write([]byte(parentRef))
	h.Write([]byte{0})
	h.Write([]byte(class))
	h.Write([]byte{0})
	h.Write([]byte(key))
	sum := h.Sum(nil)
	v := binary.BigEndian.Uint64(sum[:8]) % (36 * 36 * 36 * 36 * 36 * 36)
	s := strconv.FormatUint(v, 36)
	return "e" + strings.Repeat("0", 6-len(s)) + s
}

// parseBounds reads "[x1,y1][x2,y2]".
func parseBounds(s string) ([4]int, error) {
	var b [4]int
	if _, err := fmt.Sscanf(s, "[%d,%d][%d,%d]", &b[0], &b[1], &b[2], &b[3]); err != nil {
		return b, fmt.Errorf("ui dump: bad bounds %q", s)
	}
	return b, nil
}
