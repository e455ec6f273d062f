package pmix

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
)

// labeller writes the job's output forwarded to the tool, one line at a time, each labelled
// the way Open MPI's --tag-output labels it: "[job,rank]<stdout>:text" (the text exactly as
// the rank wrote it), job being the part of the nspace after its '@'.
type labeller struct {
	mu      sync.Mutex
	stdout  io.Writer
	stderr  io.Writer
	partial map[outputSource][]byte
}

type outputSource struct {
	channel int // 1 stdout, 2 stderr
	nspace  string
	rank    uint32
}

// output is the tool process's labeller (libpmix delivers output to a C callback).
var output = &labeller{stdout: os.Stdout, stderr: os.Stderr}

// add takes one chunk of a process's output and writes its complete lines.
func (l *labeller) add(channel int, nspace string, rank uint32, data []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.partial == nil {
		l.partial = map[outputSource][]byte{}
	}
	src := outputSource{channel, nspace, rank}
	buf := append(l.partial[src], data...)
	for {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			break
		}
		l.write(src, buf[:i+1])
		buf = buf[i+1:]
	}
	if len(buf) == 0 {
		delete(l.partial, src)
	} else {
		l.partial[src] = append([]byte(nil), buf...)
	}
}

// flush writes every unterminated last line.
func (l *labeller) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for src, buf := range l.partial {
		l.write(src, append(buf, '\n'))
	}
	l.partial = nil
}

func (l *labeller) write(src outputSource, line []byte) {
	job := src.nspace
	if i := strings.LastIndexByte(job, '@'); i >= 0 {
		job = job[i+1:]
	}
	w, stream := l.stdout, "stdout"
	if src.channel == 2 {
		w, stream = l.stderr, "stderr"
	}
	fmt.Fprintf(w, "[%s,%d]<%s>:%s", job, src.rank, stream, line)
}
