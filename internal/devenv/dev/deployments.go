package dev

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opzero/opzero/internal/devenv/interp"
	"github.com/opzero/opzero/internal/devenv/mountns"
	"github.com/opzero/opzero/internal/localport"
)

// startDeployments runs each Deployment with a ko:// image (the wakeup
// source is one), or with a local command (annCommand: a hook behind a
// Service), as one local process, always on.
func (p *Platform) startDeployments(ctx context.Context, _ []net.Listener) error {
	objs, err := p.readBack(ctx, "apps", "Deployment")
	if err != nil {
		return err
	}
	for _, u := range objs {
		pkg, ok, err := deploymentImage(u)
		if err != nil {
			return err
		}
		command, err := localCommand(u, "Deployment "+key(u))
		if err != nil {
			return err
		}
		var workDir string
		var binds []mountns.Bind
		var hook *interp.Hook
		what := "ko://" + pkg
		if !ok && command == nil {
			// hosted as Metacontroller's examples host hooks: an
			// interpreter image running a script from a ConfigMap
			if hook, command, workDir, binds, err = p.interpreterCommand(u); err != nil {
				if errors.Is(err, interp.ErrNotRecognized) {
					p.say("Deployment %s: only applied, not run: %v", key(u), err)
					continue
				}
				return err
			}
			what = "local interpreter"
		}
		cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		c, _ := cs[0].(map[string]any)
		var exe, argv []string
		if command != nil {
			// the annotation (or the interpreter's) is the whole command
			// line; its arguments are read as the container's args are:
			// local URLs, $(VAR), and ports a probe or a containerPort
			// names moved to free local ones (several local commands may
			// bind the same port, each in a pod of its own in a cluster)
			exe, argv = command[:1], slices.Clone(command[1:])
			if what != "local interpreter" {
				what = "local command"
			}
		} else {
			if exe, err = p.build.build(ctx, pkg); err != nil {
				return err
			}
			argv, _, _ = unstructured.NestedStringSlice(c, "args")
		}
		for i := range argv {
			argv[i] = rewrite(argv[i], p.localURLs)
		}
		kc, as, err := p.kubeconfigFor(ctx, u, "spec", "template", "spec")
		if err != nil {
			return err
		}
		whEnv, wh := p.webhookProcess(u, c, argv)
		if wh == nil { // dev's own webhook servers get dev's certificate (webhookProcess)
			if err := p.mountIssued(u, c, exe[1:], argv); err != nil {
				return err
			}
		}
		env, err := p.containerEnv(ctx, "Deployment "+key(u), pod{u: u, namespace: u.GetNamespace(), name: u.GetName() + "-local"}, c,
			slices.Concat([]string{"KUBECONFIG=" + kc, "HTTP_PROXY=" + p.namesURL, "HTTPS_PROXY=" + p.namesURL, noProxy}, whEnv, p.opts.Env)...)
		if err != nil {
			return err
		}
		argv = expandArgs(argv, env)
		name := "deployment-" + u.GetNamespace() + "-" + u.GetName()
		logf, err := p.logFile(name)
		if err != nil {
			return err
		}
		local := func(port int) (int, error) {
			if l, ok := p.moved[key(u)][port]; ok {
				return l, nil // a local command's port that an earlier one binds too
			}
			if command != nil {
				return port, nil // its own, as in its pod: Services and the hub reach it at its pod's address
			}
			return localport.Free() // dev's own images: always moved
		}
		probe, err := livenessProbe(u, c, argv, local)
		if err != nil {
			return err
		}
		if err := ownPorts(u, c, argv, local); err != nil {
			return err
		}
		for port := range p.moved[key(u)] { // the ports its Services target
			if _, err := movePort(argv, port, local); err != nil {
				return err
			}
		}
		binds = p.canBind(u, binds)
		nsRoot := filepath.Join(p.opts.Dir, "mountns", "deployment-"+u.GetNamespace()+"-"+u.GetName())
		start := func(ctx context.Context) (running, error) {
			if hook != nil {
				// its ConfigMaps' and Secrets' files written at each
				// start: a restart sees them as they are now
				if err := p.hookFiles(ctx, u, hook); err != nil {
					return nil, fmt.Errorf("Deployment %s: %w", key(u), err)
				}
			}
			cmd := exec.Command(exe[0], slices.Concat(exe[1:], argv)...)
			cmd.Env, cmd.Stdout, cmd.Stderr = env, logf, logf
			switch {
			case workDir != "":
				cmd.Dir = workDir // the container's workingDir, or the ConfigMaps' folder
			case command != nil:
				cmd.Dir = p.build.buildDir // relative paths, as a Knative Service's command
			}
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			if binds != nil { // its volumes at their mount paths, in a mount namespace of its own
				nc, err := mountns.Command(nsRoot, binds, cmd.Dir, append([]string{cmd.Path}, cmd.Args[1:]...), env)
				if err != nil {
					return nil, fmt.Errorf("Deployment %s: %w", key(u), err)
				}
				nc.Stdout, nc.Stderr = logf, logf
				nc.SysProcAttr.Pdeathsig = syscall.SIGKILL
				cmd = nc
			}
			pr, err := startProc(cmd)
			if err != nil {
				return nil, fmt.Errorf("Deployment %s: starting %s: %w", key(u), what, err)
			}
			pr.probe = probe
			return pr, nil
		}
		if replicasOf(u) == 0 || p.hubTarget(u) {
			// Scaled by the opzero hub (or by hand): runs while it has replicas.
			follow := func(context.Context) (running, error) { return p.followReplicas(u, start), nil }
			r, _ := follow(ctx)
			s := &supervised{what: "Deployment " + key(u), start: follow, cur: r}
			p.supervise(s)
			p.procs = append(p.procs, s)
			p.Sources = append(p.Sources, fmt.Sprintf("Deployment %s (%s %s, while scaled above 0)", key(u), what, strings.Join(slices.Concat(command, argv), " ")))
			p.say("Deployment %s: %s runs while its spec.replicas is above 0 (now %d; one process, a pod of it marked Ready once its probe answers; log %s)",
				key(u), what, replicasOf(u), p.LogPath(name))
			continue
		}
		started := func(ctx context.Context, r running) error {
			p.say("Deployment %s: %s running as pid %d (one replica, always on, restarted if it exits%s; its pods marked Ready while it runs; runs as %s; log %s)",
				key(u), what, r.PID(), probeNote(u, c), as, p.LogPath(name))
			p.opts.Events.Write(Event{Event: EventProcessStarted, Deployment: key(u), PID: r.PID()})
			if wh == nil {
				return nil
			}
			if err := wh.waitServing(ctx, "Deployment "+key(u), time.Minute); err != nil {
				return err
			}
			p.say("Deployment %s: serves webhooks at https://127.0.0.1:%d (certificate in %s)", key(u), wh.port, wh.dir)
			return nil
		}
		r, err := start(ctx)
		var missing *interp.MissingError
		switch {
		case errors.As(err, &missing): // as a kubelet, it waits for the object (mountwait.go)
			r = p.waitMounts(u, err, start, started)
		case err != nil:
			return err
		default:
			if err := started(ctx, r); err != nil {
				r.Stop()
				return err
			}
		}
		s := &supervised{what: "Deployment " + key(u), start: start, cur: r, gone: p.deploymentGone(u), ready: p.podsReady(u)}
		p.supervise(s)
		p.procs = append(p.procs, s)
		p.Sources = append(p.Sources, fmt.Sprintf("Deployment %s (%s %s)", key(u), what, strings.Join(slices.Concat(command, argv), " ")))
	}
	return nil
}

// hubTarget: a Subscription of the manifests names the Deployment as its
// sink (an unchanged operator the hub scales between 0 and 1).
func (p *Platform) hubTarget(u *unstructured.Unstructured) bool {
	for _, o := range p.opts.Objects {
		if !isKind(o, "opzero.dev", "Subscription") {
			continue
		}
		ns := o.GetNamespace()
		if ns == "" {
			ns = p.opts.Namespace
		}
		k, _, _ := unstructured.NestedString(o.Object, "spec", "sink", "ref", "kind")
		n, _, _ := unstructured.NestedString(o.Object, "spec", "sink", "ref", "name")
		if k == "Deployment" && n == u.GetName() && ns == u.GetNamespace() {
			return true
		}
	}
	return false
}

// livenessProbe plays the container's livenessProbe httpGet on 127.0.0.1;
// nil without one. In a cluster each pod has a network of its own; here the
// processes share one, so the probe's port gets a free local port instead:
// arguments that end in ":<port>" (--health-addr=:8081) are rewritten in
// place to it, and the probe asks it (without such an argument, the port
// itself).
func livenessProbe(u *unstructured.Unstructured, c map[string]any, argv []string, local func(int) (int, error)) (func(context.Context, time.Duration) error, error) {
	get, ok, _ := unstructured.NestedMap(c, "livenessProbe", "httpGet")
	if !ok {
		return nil, nil
	}
	path, _, _ := unstructured.NestedString(get, "path")
	port, err := probePort(u, c, get)
	if err != nil {
		return nil, err
	}
	moved, err := movePort(argv, port, local)
	if err != nil {
		return nil, fmt.Errorf("Deployment %s: a local port for its probe: %w", key(u), err)
	}
	if moved == 0 { // the program binds the port itself: probe it there
		moved = port
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/%s", moved, strings.TrimPrefix(path, "/"))
	return func(ctx context.Context, timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("GET %s: %w", url, err)
		}
		resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode >= 400 { // kubelet's success range
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	}, nil
}

// probePort is the port of a livenessProbe's httpGet (get): a number or
// the name of a containerPort.
func probePort(u *unstructured.Unstructured, c, get map[string]any) (int, error) {
	port := 0
	switch v := get["port"].(type) {
	case int64:
		port = int(v)
	case float64:
		port = int(v)
	case string:
		ports, _, _ := unstructured.NestedSlice(c, "ports")
		for _, cp := range ports {
			m, _ := cp.(map[string]any)
			if m["name"] == v {
				n, _, _ := unstructured.NestedInt64(m, "containerPort")
				port = int(n)
			}
		}
	}
	if port <= 0 {
		return 0, fmt.Errorf("Deployment %s: livenessProbe.httpGet.port %v is neither a number nor a named containerPort", key(u), get["port"])
	}
	return port, nil
}

func probeNote(u *unstructured.Unstructured, c map[string]any) string {
	if _, ok, _ := unstructured.NestedMap(c, "livenessProbe", "httpGet"); ok {
		return " or its livenessProbe fails"
	}
	return ""
}

// ownPorts gives each of the container's declared ports that its
// arguments bind (an argument ending in ":<containerPort>", such as the
// hub's --webhook-addr=:8443) a free local port instead (movePort): in a
// cluster each pod has a network of its own, here every process (and
// every other opzero dev on the machine) shares one. Run after
// livenessProbe, which moves the probe's port the same way.
func ownPorts(u *unstructured.Unstructured, c map[string]any, argv []string, local func(int) (int, error)) error {
	ports, _, _ := unstructured.NestedSlice(c, "ports")
	for _, cp := range ports {
		m, _ := cp.(map[string]any)
		if n, ok, _ := unstructured.NestedInt64(m, "containerPort"); ok && n > 0 {
			if _, err := movePort(argv, int(n), local); err != nil {
				return fmt.Errorf("Deployment %s: a local port for its port %d: %w", key(u), n, err)
			}
		}
	}
	return nil
}

// movePort rewrites in place the arguments ending in ":<port>" to one
// local port (local(port): a free one, or the one planned for it) and
// returns it; 0 when no argument binds port.
func movePort(argv []string, port int, local func(int) (int, error)) (int, error) {
	suffix, moved := fmt.Sprintf(":%d", port), 0
	for i, a := range argv {
		if !strings.HasSuffix(a, suffix) {
			continue
		}
		if moved == 0 {
			p, err := local(port) // the process binds it, and again after each restart
			if err != nil {
				return 0, err
			}
			moved = p
		}
		argv[i] = strings.TrimSuffix(a, suffix) + fmt.Sprintf(":%d", moved)
	}
	return moved, nil
}

// interpreterCommand is the local command of a Deployment hosted as
// Metacontroller's published hooks are (package interp): the local
// interpreter on the files of the ConfigMaps it mounts, as hookFiles
// writes them under the platform's folder, the folder it runs in (its
// workingDir there, else the folder of the ConfigMaps' files) and, if it
// mounts a Secret or emptyDir, every mount bound at its path.
func (p *Platform) interpreterCommand(u *unstructured.Unstructured) (h *interp.Hook, argv []string, dir string, binds []mountns.Bind, err error) {
	if h, err = interp.Recognize(u); err != nil {
		return nil, nil, "", nil, err
	}
	prog, err := exec.LookPath(h.Program)
	if err != nil {
		return nil, nil, "", nil, fmt.Errorf("Deployment %s: its image runs %s, which is not installed here: %w (install it, or annotate the Deployment %s)", key(u), h.Program, err, interp.Annotation)
	}
	root := p.hookRoot(u)
	args, wd := h.Paths(root)
	if !strings.HasPrefix(wd, root) { // unset, or a folder of the image: none here
		wd = root
	}
	if h.NeedsPaths() { // every mount at its path, its ConfigMaps' too
		for _, m := range h.Mounts {
			binds = append(binds, mountns.Bind{Src: h.Local(root, m), Dst: m.MountPath})
		}
	}
	return h, append([]string{prog}, args...), wd, binds, nil
}

// hookRoot is the folder of a hook's volumes' files.
func (p *Platform) hookRoot(u *unstructured.Unstructured) string {
	return filepath.Join(p.opts.Dir, "files", "deployment-"+u.GetNamespace()+"-"+u.GetName())
}

// hookFiles writes afresh the files of hook h's volumes (Deployment u's)
// as the API server has its ConfigMaps and Secrets now; a required one
// that does not exist is an *interp.MissingError.
func (p *Platform) hookFiles(ctx context.Context, u *unstructured.Unstructured, h *interp.Hook) error {
	root := p.hookRoot(u)
	if err := os.RemoveAll(root); err != nil {
		return err
	}
	read := func(kind string) interp.ConfigMapFunc {
		return func(name string) (*unstructured.Unstructured, error) {
			o, err := p.core(ctx, kind, u.GetNamespace(), name)
			if apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("%w: %w", interp.ErrNotFound, err)
			}
			return o, err
		}
	}
	return h.Write(root, read("ConfigMap"), interp.SecretFunc(read("Secret")))
}

// canBind is binds if a mount namespace can be made for Deployment u
// here, else nil after a one-line warning naming the paths it is not
// given (the process starts as it did before, its arguments rewritten).
func (p *Platform) canBind(u *unstructured.Unstructured, binds []mountns.Bind) []mountns.Bind {
	if binds == nil {
		return nil
	}
	err := mountns.Available()
	if err == nil {
		err = mountns.Check(binds)
	}
	if err == nil {
		return binds
	}
	var paths []string
	for _, b := range binds {
		paths = append(paths, b.Dst)
	}
	p.say("Deployment %s: its volumes are not at %s (only its arguments name their local copies): %v", key(u), strings.Join(paths, ", "), err)
	return nil
}

// core is a ConfigMap or Secret (kind) of the manifests, as the API
// server has it.
func (p *Platform) core(ctx context.Context, kind, ns, name string) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind(kind)
	u.SetNamespace(ns)
	u.SetName(name)
	return p.apply.get(ctx, u)
}

// interpreted reports whether a Deployment without annCommand runs
// locally on its interpreter (package interp).
func interpreted(u *unstructured.Unstructured) bool {
	_, err := interp.Recognize(u)
	return err == nil
}

// deploymentGone says whether Deployment u was deleted (a read that finds
// it gone; an API server away says nothing).
func (p *Platform) deploymentGone(u *unstructured.Unstructured) func(context.Context) bool {
	ns, name := u.GetNamespace(), u.GetName()
	return func(ctx context.Context) bool {
		_, err := p.apply.dyn.Resource(deploymentsGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}
}
