package main

import (
	"bufio"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// scripted serves one connection at a time: for each request it reads (up to the blank
// line after the head and the body of its Content-Length), it writes the next reply.
// It counts the connections it accepted.
func scripted(t *testing.T, replies ...string) (addr string, accepted *int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	count := 0
	go func() {
		next := 0
		for next < len(replies) {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			count++
			r := bufio.NewReader(c)
			for next < len(replies) {
				if !readRequest(r) {
					break
				}
				c.Write([]byte(replies[next]))
				next++
				if strings.Contains(replies[next-1], "Connection: close") || strings.HasPrefix(replies[next-1], "HTTP/1.0") {
					break
				}
			}
			c.Close()
		}
	}()
	return ln.Addr().String(), &count
}

func readRequest(r *bufio.Reader) bool {
	length := 0
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return false
		}
		if line == "\r\n" {
			break
		}
		if strings.HasPrefix(line, "Content-Length: ") {
			length, _ = strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "Content-Length: ")))
		}
	}
	_, err := r.Discard(length)
	return err == nil
}

func post(t *testing.T) []byte {
	t.Helper()
	return request(target{path: "/webhooks/agentmail", host: "x"}, "POST", map[string]string{"a": "b"}, "{}")
}

func far() time.Time { return time.Now().Add(5 * time.Second) }

func TestAChunkedAnswerIsReadWholeAndTheConnectionKept(t *testing.T) {
	addr, accepted := scripted(t,
		"HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: gzip, chunked\r\n\r\n4\r\nbusy\r\n0\r\n\r\n",
		"HTTP/1.1 204 No Content\r\n\r\n",
	)
	k := &conn{addr: addr}
	if got := k.roundTrip(post(t), far()); got != "503" {
		t.Fatalf("first answer: %s", got)
	}
	if got := k.roundTrip(post(t), far()); got != "204" {
		t.Fatalf("second answer, on the same connection: %s", got)
	}
	if *accepted != 1 {
		t.Fatalf("%d connections for two keep-alive answers", *accepted)
	}
}

func TestConnectionCloseAmongTokensMakesTheNextRequestDialAgain(t *testing.T) {
	addr, accepted := scripted(t,
		"HTTP/1.1 204 No Content\r\nConnection: Keep-Alive, close\r\n\r\n",
		"HTTP/1.1 204 No Content\r\n\r\n",
	)
	k := &conn{addr: addr}
	first, second := k.roundTrip(post(t), far()), k.roundTrip(post(t), far())
	if first != "204" || second != "204" || *accepted != 2 {
		t.Fatalf("answers %s, %s over %d connections; want 204, 204 over 2", first, second, *accepted)
	}
}

func TestAnHTTP10AnswerWithoutKeepAliveClosesTheConnection(t *testing.T) {
	addr, accepted := scripted(t,
		"HTTP/1.0 204 No Content\r\n\r\n",
		"HTTP/1.1 204 No Content\r\n\r\n",
	)
	k := &conn{addr: addr}
	k.roundTrip(post(t), far())
	if k.c != nil {
		t.Fatal("the connection was kept after an HTTP/1.0 answer")
	}
	if got := k.roundTrip(post(t), far()); got != "204" || *accepted != 2 {
		t.Fatalf("after it: %s over %d connections", got, *accepted)
	}
}

func TestANonHTTPAnswerIsABadResponse(t *testing.T) {
	addr, _ := scripted(t, "SSH-2.0-OpenSSH\r\n\r\n")
	k := &conn{addr: addr}
	if got := k.roundTrip(post(t), far()); got != "BadResponse" {
		t.Fatalf("got %s", got)
	}
}

func TestJobsTakenAfterTheDeadlineAreTimeoutsWithoutBeingSent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // accepts and never answers
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	jobs := make(chan job, 5)
	for i := 0; i < 5; i++ {
		jobs <- job{i, time.Now()}
	}
	close(jobs)
	out := &tally{statuses: map[string]int{}}
	started := time.Now()
	worker(&conn{addr: ln.Addr().String()}, [][]byte{post(t)}, jobs, time.Now().Add(200*time.Millisecond), out)
	if out.statuses["Timeout"] != 5 {
		t.Fatalf("statuses %v; want 5 timeouts", out.statuses)
	}
	if took := time.Since(started); took > 2*time.Second {
		t.Fatalf("the worker took %v past a 200 ms deadline", took)
	}
}
