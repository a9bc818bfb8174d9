// Package adb is a client of the adb server's host protocol (AOSP
// adb/OVERVIEW.TXT and SERVICES.TXT): the small part the adb backend
// needs, written once.
//
// A request is its length as four hex digits and then its text; the
// server answers OKAY, or FAIL followed by a hex length and a message.
// host:… requests are answered by the server itself; host:transport:SERIAL
// switches the connection to one device, whose services (exec:, shell:)
// then stream raw bytes both ways until either side closes.
package adb

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// DefaultAddr is where an adb server listens unless told otherwise.
const DefaultAddr = "127.0.0.1:5037"

// AddrSetting names the setting of the server's address, for messages.
const AddrSetting = "SERVICE_ADB_ADDR"

// Client talks to one adb server. It holds no connection: each call opens
// its own (the host protocol serves one request per connection), except
// Session, which keeps one.
type Client struct {
	// Addr is the server's host:port.
	Addr string
	// DialTimeout bounds connecting; zero means 3 s.
	DialTimeout time.Duration
}

// New returns a client of the server at addr (empty: DefaultAddr).
func New(addr string) *Client {
	if addr == "" {
		addr = DefaultAddr
	}
	return &Client{Addr: addr}
}

// Errors a call can answer; test them with errors.Is.
var (
	// ErrServerUnavailable: no adb server answers at the address.
	ErrServerUnavailable = errors.New("adb: no adb server answers")
	// ErrDeviceGone: the server does not know the serial, or the device
	// is offline or unauthorized, so nothing was sent to it.
	ErrDeviceGone = errors.New("adb: device not connected")
	// ErrDisconnected: the connection to the device broke during the
	// call; what was sent may have reached it.
	ErrDisconnected = errors.New("adb: connection to the device lost")
)

// ServerError is a FAIL answer of the server, or a dial failure.
type ServerError struct {
	Addr    string
	Request string
	Message string
	kind    error
}

func (e *ServerError) Error() string {
	if e.kind == ErrServerUnavailable {
		start := "adb start-server"
		if _, port, err := net.SplitHostPort(e.Addr); err == nil && e.Addr != DefaultAddr {
			start = "adb -P " + port + " start-server"
		}
		return fmt.Sprintf("no adb server answers at %s (%s): %s; start one with `%s` or set %s",
			e.Addr, AddrSetting, e.Message, start, AddrSetting)
	}
	return fmt.Sprintf("adb server %s refused %s: %s", e.Addr, e.Request, e.Message)
}

// Unwrap lets errors.Is see the kind.
func (e *ServerError) Unwrap() error { return e.kind }

// dial connects to the server.
func (c *Client) dial(ctx context.Context) (net.Conn, error) {
	d := net.Dialer{Timeout: c.DialTimeout}
	if d.Timeout == 0 {
		d.Timeout = 3 * time.Second
	}
	conn, err := d.DialContext(ctx, "tcp", c.Addr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &ServerError{Addr: c.Addr, Message: unwrapNet(err), kind: ErrServerUnavailable}
	}
	return conn, nil
}

func unwrapNet(err error) string {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err.Error()
	}
	return err.Error()
}

// watch closes conn when ctx ends, so a blocked read or write returns;
// call the returned stop when done.
func watch(ctx context.Context, conn net.Conn) (stop func() bool) {
	return context.AfterFunc(ctx, func() { _ = conn.Close() })
}

// send writes one request.
func send(w io.Writer, req string) error {
	_, err := fmt.Fprintf(w, "%04x%s", len(req), req)
	return err
}

// status reads OKAY, or FAIL and its message.
func status(r io.Reader, req string) error {
	var st [4]byte
	if _, err := io.ReadFull(r, st[:]); err != nil {
		return err
	}
	switch string(st[:]) {
	case "OKAY":
		return nil
	case "FAIL":
		msg, err := readHex(r)
		if err != nil {
			return err
		}
		return &ServerError{Request: req, Message: string(msg)}
	default:
		return fmt.Errorf("adb: unexpected answer %q to %s", st[:], req)
	}
}

// readHex reads a hex length and that many bytes.
func readHex(r io.Reader) ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	n, err := strconv.ParseUint(string(h[:]), 16, 16)
	if err != nil {
		return nil, fmt.Errorf("adb: bad length %q", h[:])
	}
	b := make([]byte, n)
	_, err = io.ReadFull(r, b)
	return b, err
}

// host sends one host request and returns its connection, answered OKAY.
func (c *Client) host(ctx context.Context, req string) (net.Conn, error) {
	conn, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	stop := watch(ctx, conn)
	err = send(conn, req)
	if err == nil {
		err = status(conn, req)
	}
	stop()
	if err != nil {
		_ = conn.Close()
		return nil, c.classify(ctx, err, req, false)
	}
	return conn, nil
}

// classify names an error: a FAIL from the server, a lost connection.
func (c *Client) classify(ctx context.Context, err error, req string, sent bool) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var se *ServerError
	if errors.As(err, &se) {
		se.Addr, se.Request = c.Addr, req
		if se.kind == nil && deviceGone(se.Message) {
			se.kind = ErrDeviceGone
		}
		return se
	}
	if sent {
		return fmt.Errorf("%w (%s): %v", ErrDisconnected, req, err)
	}
	return &ServerError{Addr: c.Addr, Request: req, Message: err.Error(), kind: ErrServerUnavailable}
}

// deviceGone reports whether a FAIL message says the device is not there.
func deviceGone(msg string) bool {
	for _, s := range []string{"not found", "offline", "unauthorized", "no devices", "closed", "connecting"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// hostValue sends a host request whose answer is one hex-length value.
func (c *Client) hostValue(ctx context.Context, req string) ([]byte, error) {
	conn, err := c.host(ctx, req)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	stop := watch(ctx, conn)
	defer stop()
	b, err := readHex(conn)
	if err != nil {
		return nil, c.classify(ctx, err, req, false)
	}
	return b, nil
}

// Version returns the server's protocol version (host:version).
func (c *Client) Version(ctx context.Context) (int, error) {
	b, err := c.hostValue(ctx, "host:version")
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(string(b), 16, 32)
	if err != nil {
		return 0, fmt.Errorf("adb: bad version %q", b)
	}
	return int(v), nil
}

// DeviceInfo is one line of host:devices-l.
type DeviceInfo struct {
	Serial string
	// State is device, offline, unauthorized, … as the server says.
	State string
	// Model, Product and Device are the server's descriptive fields, when
	// it knows them.
	Model, Product, Device string
}

// Online reports whether the device can be driven now.
func (d DeviceInfo) Online() bool { return d.State == "device" }

// Devices lists the devices the server knows (host:devices-l).
func (c *Client) Devices(ctx context.Context) ([]DeviceInfo, error) {
	b, err := c.hostValue(ctx, "host:devices-l")
	if err != nil {
		return nil, err
	}
	return ParseDevices(string(b)), nil
}

// ParseDevices parses the text of host:devices-l (or host:devices): one
// device per line, serial and state, then key:value fields.
func ParseDevices(s string) []DeviceInfo {
	var out []DeviceInfo
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		d := DeviceInfo{Serial: f[0], State: f[1]}
		for _, kv := range f[2:] {
			k, v, _ := strings.Cut(kv, ":")
			switch k {
			case "model":
				d.Model = v
			case "product":
				d.Product = v
			case "device":
				d.Device = v
			}
		}
		out = append(out, d)
	}
	return out
}

// TrackDevices streams the device list (host:track-devices): fn gets the
// whole list now and again at every change, until ctx ends (nil) or the
// connection fails (the error; call again to resume).
func (c *Client) TrackDevices(ctx context.Context, fn func([]DeviceInfo)) error {
	conn, err := c.host(ctx, "host:track-devices")
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := watch(ctx, conn)
	defer stop()
	r := bufio.NewReader(conn)
	for {
		b, err := readHex(r)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return c.classify(ctx, err, "host:track-devices", true)
		}
		fn(ParseDevices(string(b)))
	}
}

// Connect asks the server to connect to a device over TCP
// (host:connect:HOST:PORT), as `adb connect` does.
func (c *Client) Connect(ctx context.Context, hostport string) (string, error) {
	b, err := c.hostValue(ctx, "host:connect:"+hostport)
	if err != nil {
		return "", err
	}
	msg := string(b)
	if strings.HasPrefix(msg, "failed") || strings.HasPrefix(msg, "unable") || strings.Contains(msg, "cannot") {
		return msg, &ServerError{Addr: c.Addr, Request: "host:connect:" + hostport, Message: msg}
	}
	return msg, nil
}

// Disconnect asks the server to drop a TCP device (host:disconnect:…).
func (c *Client) Disconnect(ctx context.Context, hostport string) error {
	_, err := c.hostValue(ctx, "host:disconnect:"+hostport)
	return err
}

// Open switches a new connection to the device serial and opens service
// on it (exec:…, shell:…). The caller reads and writes the raw stream and
// closes it. Errors: ErrServerUnavailable, ErrDeviceGone (nothing reached
// the device), a ServerError for a refused service.
func (c *Client) Open(ctx context.Context, serial, service string) (net.Conn, error) {
	conn, err := c.host(ctx, "host:transport:"+serial)
	if err != nil {
		return nil, err
	}
	stop := watch(ctx, conn)
	err = send(conn, service)
	if err == nil {
		err = status(conn, service)
	}
	stop()
	if err != nil {
		_ = conn.Close()
		err = c.classify(ctx, err, service, false)
		var se *ServerError
		if errors.As(err, &se) && se.kind == ErrServerUnavailable {
			// The server took the transport and then dropped us: the
			// device went away between the two requests.
			return nil, fmt.Errorf("%w: %v", ErrDeviceGone, err)
		}
		return nil, err
	}
	return conn, nil
}

// Exec runs cmd on the device through exec: (raw bytes, no terminal),
// writes stdin to it if not nil, and returns everything it printed.
// The exit status is not carried by exec:. Errors: as Open, and
// ErrDisconnected when the stream broke before the device closed it.
func (c *Client) Exec(ctx context.Context, serial, cmd string, stdin io.Reader) ([]byte, error) {
	return c.run(ctx, serial, "exec:"+cmd, stdin)
}

// Shell runs cmd through shell: on a connection of its own and returns
// its output.
func (c *Client) Shell(ctx context.Context, serial, cmd string) ([]byte, error) {
	return c.run(ctx, serial, "shell:"+cmd, nil)
}

func (c *Client) run(ctx context.Context, serial, service string, stdin io.Reader) ([]byte, error) {
	conn, err := c.Open(ctx, serial, service)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	stop := watch(ctx, conn)
	defer stop()
	if stdin != nil {
		if _, err := io.Copy(conn, stdin); err != nil {
			return nil, c.classify(ctx, err, service, true)
		}
	}
	var out bytes.Buffer
	if _, err := io.Copy(&out, conn); err != nil {
		return out.Bytes(), c.classify(ctx, err, service, true)
	}
	return out.Bytes(), nil
}
