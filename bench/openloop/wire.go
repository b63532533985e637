package main

// The HTTP/1.1 client of the generator: each request is written once as its wire bytes
// when the pool is read, so that sending one is a single write, and each answer is read
// with no more parsing than its status, its length and whether it closes the connection.
// net/http's client spent about a third more CPU per request here, which on a machine
// the server shares is CPU taken from the server.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// target is where the deliveries go: the address to dial and the request's Host and path.
type target struct {
	addr, host, path string
}

func parseTarget(raw string) (target, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return target{}, err
	}
	if u.Scheme != "http" || u.Host == "" {
		return target{}, fmt.Errorf("%s: an http:// URL with a host is needed", raw)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	return target{addr, u.Host, u.RequestURI()}, nil
}

// request is one request's bytes on the wire.
func request(t target, method string, headers map[string]string, body string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", method, t.path, t.host)
	for k, v := range headers {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v)
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(body), body)
	return b.Bytes()
}

// conn is one keep-alive connection, dialled again after any failure.
type conn struct {
	addr string
	c    net.Conn
	r    *bufio.Reader
}

func (k *conn) dial() error {
	c, err := net.DialTimeout("tcp", k.addr, 5*time.Second)
	if err != nil {
		return err
	}
	k.c, k.r = c, bufio.NewReaderSize(c, 16<<10)
	return nil
}

func (k *conn) drop() {
	if k.c != nil {
		k.c.Close()
		k.c = nil
	}
}

// roundTrip writes one request and reads its answer by the deadline: the status code as
// text, or the kind of failure ("ConnectionError", "Timeout", "BadResponse").
func (k *conn) roundTrip(req []byte, deadline time.Time) string {
	if k.c == nil {
		if err := k.dial(); err != nil {
			return "ConnectionError"
		}
	}
	k.c.SetDeadline(deadline)
	status, err := k.exchange(req)
	if err == nil {
		return status
	}
	k.drop()
	var netErr net.Error
	switch {
	case errors.As(err, &netErr) && netErr.Timeout():
		return "Timeout"
	case status != "":
		return status
	default:
		return "ConnectionError"
	}
}

// answer is what the head of a response says about the body after it and the connection.
type answer struct {
	status  string
	length  int // -1: not given
	chunked bool
	closing bool
}

// exchange sends req, then reads the head and the body it announces: Content-Length,
// chunked, or (neither, with a body allowed) up to the end of the connection. It closes
// the connection when the answer says so, or is HTTP/1.0 without keep-alive.
func (k *conn) exchange(req []byte) (string, error) {
	if _, err := k.c.Write(req); err != nil {
		return "", err
	}
	a, err := k.head()
	if err != nil {
		return a.status, err
	}
	noBody := a.status == "204" || a.status == "304" || strings.HasPrefix(a.status, "1")
	switch {
	case a.chunked:
		err = k.skipChunks()
	case a.length >= 0:
		_, err = k.r.Discard(a.length)
	case !noBody:
		_, err = io.Copy(io.Discard, k.r)
		a.closing = true
	}
	if err == nil && a.closing {
		k.drop()
	}
	return a.status, err
}

func (k *conn) head() (answer, error) {
	line, err := k.r.ReadString('\n')
	if err != nil {
		return answer{}, err
	}
	fields := strings.Fields(line)
	if len(fields) < 2 || !strings.HasPrefix(fields[0], "HTTP/1.") {
		return answer{status: "BadResponse"}, fmt.Errorf("not an HTTP/1 status line: %q", line)
	}
	a := answer{status: fields[1], length: -1, closing: fields[0] == "HTTP/1.0"}
	for {
		h, err := k.r.ReadString('\n')
		if err != nil {
			return answer{}, err
		}
		h = strings.TrimRight(h, "\r\n")
		if h == "" {
			return a, nil
		}
		name, value, _ := strings.Cut(h, ":")
		tokens := strings.Split(strings.ToLower(value), ",")
		for i := range tokens {
			tokens[i] = strings.TrimSpace(tokens[i])
		}
		switch strings.ToLower(name) {
		case "content-length":
			if a.length, err = strconv.Atoi(strings.TrimSpace(value)); err != nil {
				return answer{status: "BadResponse"}, err
			}
		case "transfer-encoding":
			a.chunked = tokens[len(tokens)-1] == "chunked"
		case "connection":
			for _, t := range tokens {
				a.closing = a.closing && t != "keep-alive" || t == "close"
			}
		}
	}
}

func (k *conn) skipChunks() error {
	for {
		line, err := k.r.ReadString('\n')
		if err != nil {
			return err
		}
		size, err := strconv.ParseInt(strings.TrimSpace(strings.SplitN(line, ";", 2)[0]), 16, 64)
		if err != nil {
			return err
		}
		if _, err := k.r.Discard(int(size) + 2); err != nil { // the chunk and its CRLF
			return err
		}
		if size == 0 {
			return nil
		}
	}
}
