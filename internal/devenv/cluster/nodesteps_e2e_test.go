package cluster

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// nodeSteps adds to ps the steps of pod ps.pod that only the node's own
// logs tell, from their timestamps (the node shares the test's clock: one
// machine): the kubelet admitting the pod (its volumes' set-up starts),
// containerd's sandbox (asked, ready), each container started (runc's
// start returned), the kubelet seeing them all running (its "Observed pod
// startup duration": the next relist after the last start) and the
// kubelet's first readiness probe that passed. Nothing is added for a
// line that is not found.
func (e *e2e) nodeSteps(ps *podSteps) {
	ps.mu.Lock()
	pod := ps.pod
	ps.mu.Unlock()
	if pod == "" {
		return
	}
	logs := filepath.Join(e.c.Dir, "logs")
	var sandbox string
	containers := map[string]string{} // container id -> name
	eachLine(filepath.Join(logs, "containerd.log"), func(l string) {
		at, ok := containerdTime(l)
		if !ok {
			return
		}
		switch {
		case strings.Contains(l, "RunPodSandbox for") && strings.Contains(l, "Name:"+pod+","):
			if m := sandboxID.FindStringSubmatch(l); m != nil {
				sandbox = m[1]
				ps.at("sandbox ready (containerd)", at)
			} else {
				ps.at("sandbox asked (containerd)", at)
			}
		case sandbox != "" && strings.Contains(l, `CreateContainer within sandbox \"`+sandbox):
			if m := createdID.FindStringSubmatch(l); m != nil {
				containers[m[2]] = m[1]
			}
		case strings.Contains(l, "StartContainer for") && strings.Contains(l, "returns successfully"):
			if m := startedID.FindStringSubmatch(l); m != nil && containers[m[1]] != "" {
				ps.at(containers[m[1]]+" started (containerd)", at)
			}
		}
	})
	eachLine(filepath.Join(logs, "kubelet.log"), func(l string) {
		if !strings.Contains(l, pod) {
			return
		}
		at, ok := klogTime(l)
		if !ok {
			return
		}
		switch {
		case strings.Contains(l, "VerifyControllerAttachedVolume started"):
			ps.at("admitted (kubelet)", at)
		case strings.Contains(l, "Observed pod startup duration"):
			ps.at("containers seen running (kubelet)", at)
		case strings.Contains(l, `probe="readiness" status="ready"`):
			ps.at("readiness passed (kubelet)", at)
		}
	})
}

var (
	sandboxID = regexp.MustCompile(`returns sandbox id \\"([0-9a-f]+)`)
	createdID = regexp.MustCompile(`for &ContainerMetadata\{Name:([^,]+),Attempt:\d+,\} returns container id \\"([0-9a-f]+)`)
	startedID = regexp.MustCompile(`StartContainer for \\"([0-9a-f]+)\\" returns successfully`)
	ctrdTime  = regexp.MustCompile(`^time="([^"]+)"`)
	klogStamp = regexp.MustCompile(`^[IWE](\d{4} \d{2}:\d{2}:\d{2}\.\d{6})`)
)

func eachLine(path string, f func(string)) {
	fd, err := os.Open(path)
	if err != nil {
		return
	}
	defer fd.Close()
	sc := bufio.NewScanner(fd)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		f(sc.Text())
	}
}

func containerdTime(l string) (time.Time, bool) {
	m := ctrdTime.FindStringSubmatch(l)
	if m == nil {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, m[1])
	return t, err == nil
}

// klogTime reads a klog line's stamp (month, day and time, local time; the
// year is the current one).
func klogTime(l string) (time.Time, bool) {
	m := klogStamp.FindStringSubmatch(l)
	if m == nil {
		return time.Time{}, false
	}
	now := time.Now()
	t, err := time.ParseInLocation("0102 15:04:05.000000", m[1], time.Local)
	if err != nil {
		return time.Time{}, false
	}
	return t.AddDate(now.Year(), 0, 0), true
}
