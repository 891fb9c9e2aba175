package main

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat CPU times (100 on Linux).
const clockTicks = 100

// cpuUse is the CPU time the capture path spent in a window, by process.
type cpuUse struct {
	walSender    time.Duration // the database's WAL sender (decoding)
	backends     time.Duration // the database's other backends (materialization, the worker's queries)
	worker       time.Duration // this process (the capture worker, its pool and the wait loop)
	measuredProc bool          // the cluster's processes were readable in /proc (it runs on this host)
}

// cpuWindow samples the CPU time of the PostgreSQL processes of database db
// (from /proc, so only when the cluster runs on this host) and of this process
// until the returned function is called, which returns the CPU time each spent
// in the window. Processes are polled every 25ms (a query of pg_stat_activity,
// about 1% of a core); one that exits between two polls loses its last 25ms.
func cpuWindow(ctx context.Context, pool *pgxpool.Pool, db string) func() cpuUse {
	type proc struct {
		walSender   bool
		first, last int64
	}
	procs := map[int]*proc{}
	var mu sync.Mutex
	poll := func(baseline bool) {
		rows, err := pool.Query(ctx, `SELECT pid, backend_type = 'walsender' FROM pg_stat_activity
			WHERE datname = $1 AND pid <> pg_backend_pid()`, db)
		if err != nil {
			return
		}
		defer rows.Close()
		mu.Lock()
		defer mu.Unlock()
		for rows.Next() {
			var pid int
			var walSender bool
			if rows.Scan(&pid, &walSender) != nil {
				return
			}
			ticks, ok := procTicks(pid)
			if !ok {
				continue
			}
			p := procs[pid]
			if p == nil {
				p = &proc{walSender: walSender}
				if baseline {
					p.first = ticks // running before the window: count from here
				}
				procs[pid] = p
			}
			p.last = ticks
		}
	}
	goStart := selfCPU()
	poll(true)
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(25 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				poll(false)
			}
		}
	}()
	return func() cpuUse {
		poll(false)
		close(done)
		<-stopped
		use := cpuUse{worker: selfCPU() - goStart, measuredProc: len(procs) > 0}
		for _, p := range procs {
			d := time.Duration(p.last-p.first) * time.Second / clockTicks
			if p.walSender {
				use.walSender += d
			} else {
				use.backends += d
			}
		}
		return use
	}
}

// procTicks reads the user and system CPU time of process pid in clock ticks.
func procTicks(pid int) (int64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name (field 2) is parenthesized and may hold spaces; utime and
	// stime are fields 14 and 15, the 12th and 13th after it.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return utime + stime, true
}

// selfCPU is this process's user and system CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
