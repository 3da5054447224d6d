// fakecri: a fake container runtime for kubelet nodes of the local cluster.
//
// It serves CRI (runtime and image service) on a unix socket with the in-memory fake of
// k8s.io/cri-client/pkg/fake, and adds what the harness needs:
//
//   - CreateContainer resolves the CDI device ids the kubelet passes (CDIDevices, and the
//     cdi.k8s.io/* annotations) with the CDI library container runtimes use, against the node's
//     CDI spec dir; an id that does not resolve, or a spec a runtime would refuse, fails the call.
//     StartContainer writes the same ContainerView JSON file the node agent writes
//     (<containers-dir>/<namespace>_<pod>_<container>.json); RemoveContainer and
//     RemovePodSandbox remove it.
//   - the pod annotation dra-conformance.io/run-seconds: "N" makes the containers exit 0 after N s
//     (with dra-conformance.io/exit-code: "C", exit C).
//   - init containers (restartPolicy not Always) exit 0 at once, as the node agent has them do; which
//     containers are init containers CRI does not say, so the pod is read from the API server with
//     the node's credentials (--server, --ca, --cert, --key).
//   - containers live in this process's memory, so they outlive kubelet restarts.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc"
	kubeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	specs "tags.cncf.io/container-device-interface/specs-go"
)

const runSecondsAnnotation = "dra-conformance.io/run-seconds"

const exitCodeAnnotation = "dra-conformance.io/exit-code"

// view is the ContainerView JSON (docs/interfaces.md), merged the way the node agent merges it.
type view struct {
	Env            map[string]string `json:"env"`
	DeviceNodes    []any             `json:"device_nodes"`
	Mounts         []any             `json:"mounts"`
	CDIDevices     []string          `json:"cdi_devices"`
	NetDevices     []any             `json:"net_devices"`
	Hooks          []any             `json:"hooks"`
	AdditionalGIDs []uint32          `json:"additional_gids"`
	IntelRdt       any               `json:"intel_rdt"`
}

func newView(ids []string) *view {
	return &view{
		Env: map[string]string{}, DeviceNodes: []any{}, Mounts: []any{}, CDIDevices: ids,
		NetDevices: []any{}, Hooks: []any{}, AdditionalGIDs: []uint32{},
	}
}

func asMap(v any) map[string]any {
	raw, _ := json.Marshal(v)
	out := map[string]any{}
	_ = json.Unmarshal(raw, &out)
	return out
}

func replaceBy(list []any, key string, item map[string]any) []any {
	kept := []any{}
	for _, old := range list {
		if m, ok := old.(map[string]any); ok && m[key] == item[key] {
			continue
		}
		kept = append(kept, old)
	}
	return append(kept, item)
}

func (v *view) apply(e *specs.ContainerEdits) {
	for _, kv := range e.Env {
		k, val, _ := strings.Cut(kv, "=")
		v.Env[k] = val
	}
	for _, n := range e.DeviceNodes {
		v.DeviceNodes = replaceBy(v.DeviceNodes, "path", asMap(n))
	}
	for _, m := range e.Mounts {
		v.Mounts = replaceBy(v.Mounts, "containerPath", asMap(m))
	}
	for _, n := range e.NetDevices {
		v.NetDevices = replaceBy(v.NetDevices, "name", asMap(n))
	}
	for _, h := range e.Hooks {
		v.Hooks = append(v.Hooks, asMap(h))
	}
	for _, g := range e.AdditionalGIDs {
		seen := false
		for _, have := range v.AdditionalGIDs {
			seen = seen || have == g
		}
		if !seen {
			v.AdditionalGIDs = append(v.AdditionalGIDs, g)
		}
	}
	if e.IntelRdt != nil {
		v.IntelRdt = asMap(e.IntelRdt)
	}
}

type runtime struct {
	*fake.RemoteRuntime
	cdiDir        string
	containersDir string

	api *http.Client
	// base URL of the API server; "" when no credentials were given (init containers then run on)
	server string

	mu    sync.Mutex
	views map[string]*pending        // by container id
	inits map[string]map[string]bool // init container names by sandbox id
}

// initContainers are the names of the pod's init containers that run to completion.
func (r *runtime) initContainers(sandboxID string, meta *kubeapi.PodSandboxMetadata) map[string]bool {
	r.mu.Lock()
	names, ok := r.inits[sandboxID]
	r.mu.Unlock()
	if ok || r.server == "" {
		return names
	}
	names = map[string]bool{}
	url := fmt.Sprintf("%s/api/v1/namespaces/%s/pods/%s", r.server, meta.GetNamespace(), meta.GetName())
	resp, err := r.api.Get(url)
	if err != nil {
		log.Printf("reading pod %s/%s: %v", meta.GetNamespace(), meta.GetName(), err)
		return names
	}
	defer resp.Body.Close()
	var pod struct {
		Spec struct {
			InitContainers []struct {
				Name          string `json:"name"`
				RestartPolicy string `json:"restartPolicy"`
			} `json:"initContainers"`
		} `json:"spec"`
	}
	if resp.StatusCode != http.StatusOK {
		log.Printf("reading pod %s/%s: HTTP %d", meta.GetNamespace(), meta.GetName(), resp.StatusCode)
		return names
	}
	if err := json.NewDecoder(resp.Body).Decode(&pod); err != nil {
		log.Printf("reading pod %s/%s: %v", meta.GetNamespace(), meta.GetName(), err)
		return names
	}
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != "Always" { // a sidecar runs on
			names[c.Name] = true
		}
	}
	r.mu.Lock()
	r.inits[sandboxID] = names
	r.mu.Unlock()
	return names
}

type pending struct {
	path       string
	view       *view
	runSeconds int
	exitCode   int32
	init       bool
}

func (r *runtime) resolve(ids []string) (*view, error) {
	out := newView(ids)
	if len(ids) == 0 {
		return out, nil
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(r.cdiDir), cdi.WithAutoRefresh(false))
	if cache == nil {
		return nil, fmt.Errorf("CDI cache for %s: %w", r.cdiDir, err)
	}
	// what a runtime does: inject into an OCI spec; an unresolvable id or a broken edit fails here
	scratch := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
	if unresolved, err := cache.InjectDevices(scratch, ids...); err != nil {
		return nil, fmt.Errorf("CDI devices %v (unresolved %v): %w", ids, unresolved, err)
	}
	applied := map[string]bool{}
	for _, id := range ids {
		dev := cache.GetDevice(id)
		if dev == nil {
			return nil, fmt.Errorf("unresolvable CDI device %s", id)
		}
		spec := dev.GetSpec()
		if !applied[spec.GetPath()] {
			applied[spec.GetPath()] = true
			out.apply(&spec.ContainerEdits)
		}
		out.apply(&dev.ContainerEdits)
	}
	return out, nil
}

func cdiIDs(config *kubeapi.ContainerConfig) ([]string, error) {
	ids := []string{}
	for _, d := range config.GetCDIDevices() {
		ids = append(ids, d.GetName())
	}
	_, fromAnnotations, err := cdi.ParseAnnotations(config.GetAnnotations())
	if err != nil {
		return nil, err
	}
	for _, id := range fromAnnotations {
		seen := false
		for _, have := range ids {
			seen = seen || have == id
		}
		if !seen {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

func (r *runtime) CreateContainer(ctx context.Context, req *kubeapi.CreateContainerRequest) (*kubeapi.CreateContainerResponse, error) {
	ids, err := cdiIDs(req.GetConfig())
	if err != nil {
		return nil, err
	}
	v, err := r.resolve(ids)
	if err != nil {
		return nil, err
	}
	resp, err := r.RemoteRuntime.CreateContainer(ctx, req)
	if err != nil {
		return nil, err
	}
	// a real runtime reports where the container's log is; the kubelet removes "<LogPath>*" when it
	// removes the container, so an empty LogPath would have it remove files of its working directory
	logPath := filepath.Join(req.GetSandboxConfig().GetLogDirectory(), req.GetConfig().GetLogPath())
	if !filepath.IsAbs(logPath) || req.GetConfig().GetLogPath() == "" {
		logPath = filepath.Join(r.containersDir, ".logs", resp.ContainerId+".log")
	}
	r.RuntimeService.Lock()
	if c, ok := r.RuntimeService.Containers[resp.ContainerId]; ok {
		c.LogPath = logPath
	}
	r.RuntimeService.Unlock()
	meta := req.GetSandboxConfig().GetMetadata()
	name := fmt.Sprintf("%s_%s_%s.json", meta.GetNamespace(), meta.GetName(), req.GetConfig().GetMetadata().GetName())
	seconds, _ := strconv.Atoi(req.GetSandboxConfig().GetAnnotations()[runSecondsAnnotation])
	code, _ := strconv.Atoi(req.GetSandboxConfig().GetAnnotations()[exitCodeAnnotation])
	init := r.initContainers(req.PodSandboxId, meta)[req.GetConfig().GetMetadata().GetName()]
	r.mu.Lock()
	r.views[resp.ContainerId] = &pending{path: filepath.Join(r.containersDir, name), view: v, runSeconds: seconds, exitCode: int32(code), init: init}
	r.mu.Unlock()
	return resp, nil
}

func writeAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func (r *runtime) StartContainer(ctx context.Context, req *kubeapi.StartContainerRequest) (*kubeapi.StartContainerResponse, error) {
	resp, err := r.RemoteRuntime.StartContainer(ctx, req)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	p := r.views[req.ContainerId]
	r.mu.Unlock()
	if p == nil {
		return resp, nil
	}
	data, _ := json.MarshalIndent(p.view, "", " ")
	if err := writeAtomic(p.path, data); err != nil {
		log.Printf("writing %s: %v", p.path, err)
	}
	if p.init {
		id := req.ContainerId
		time.AfterFunc(50*time.Millisecond, func() { r.exit(id, 0, "Completed") })
	} else if p.runSeconds > 0 {
		id := req.ContainerId
		code, reason := p.exitCode, "Completed"
		if code != 0 {
			reason = "Error"
		}
		time.AfterFunc(time.Duration(p.runSeconds)*time.Second, func() { r.exit(id, code, reason) })
	}
	return resp, nil
}

// exit marks a running container exited (as its process ending would).
func (r *runtime) exit(id string, code int32, reason string) {
	s := r.RuntimeService
	s.Lock()
	defer s.Unlock()
	c, ok := s.Containers[id]
	if !ok || c.State != kubeapi.ContainerState_CONTAINER_RUNNING {
		return
	}
	c.State = kubeapi.ContainerState_CONTAINER_EXITED
	c.FinishedAt = time.Now().UnixNano()
	c.ExitCode = code
	c.Reason = reason
}

func (r *runtime) forget(id string) {
	r.mu.Lock()
	p := r.views[id]
	delete(r.views, id)
	r.mu.Unlock()
	if p != nil {
		_ = os.Remove(p.path)
	}
}

func (r *runtime) StopContainer(ctx context.Context, req *kubeapi.StopContainerRequest) (*kubeapi.StopContainerResponse, error) {
	resp, err := r.RemoteRuntime.StopContainer(ctx, req)
	if err == nil {
		s := r.RuntimeService
		s.Lock()
		if c, ok := s.Containers[req.ContainerId]; ok && c.FinishedAt == 0 {
			c.FinishedAt = time.Now().UnixNano()
		}
		s.Unlock()
	}
	return resp, err
}

func (r *runtime) RemoveContainer(ctx context.Context, req *kubeapi.RemoveContainerRequest) (*kubeapi.RemoveContainerResponse, error) {
	r.forget(req.ContainerId)
	return r.RemoteRuntime.RemoveContainer(ctx, req)
}

func (r *runtime) RemovePodSandbox(ctx context.Context, req *kubeapi.RemovePodSandboxRequest) (*kubeapi.RemovePodSandboxResponse, error) {
	s := r.RuntimeService
	s.Lock()
	ids := []string{}
	for id, c := range s.Containers {
		if c.SandboxID == req.PodSandboxId {
			ids = append(ids, id)
		}
	}
	s.Unlock()
	for _, id := range ids {
		r.forget(id)
	}
	r.mu.Lock()
	delete(r.inits, req.PodSandboxId)
	r.mu.Unlock()
	return r.RemoteRuntime.RemovePodSandbox(ctx, req)
}

func apiClient(caFile, certFile, keyFile string) (*http.Client, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no certificate in %s", caFile)
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	tlsConfig := &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}, nil
}

func main() {
	listen := flag.String("listen", "", "unix socket to serve CRI on")
	cdiDir := flag.String("cdi-dir", "", "the node's CDI spec dir")
	containersDir := flag.String("containers-dir", "", "where ContainerView files go")
	apiServer := flag.String("server", "", "API server URL (to tell init containers from the others)")
	caFile := flag.String("ca", "", "the API server's CA certificate")
	certFile := flag.String("cert", "", "the node's client certificate")
	keyFile := flag.String("key", "", "the node's client key")
	flag.Parse()
	if *listen == "" || *cdiDir == "" || *containersDir == "" {
		fmt.Fprintln(os.Stderr, "usage: fakecri --listen SOCKET --cdi-dir DIR --containers-dir DIR")
		os.Exit(2)
	}
	if err := os.MkdirAll(*containersDir, 0o755); err != nil {
		log.Fatal(err)
	}
	r := &runtime{
		RemoteRuntime: fake.NewFakeRemoteRuntime(), cdiDir: *cdiDir, containersDir: *containersDir,
		views: map[string]*pending{}, inits: map[string]map[string]bool{},
	}
	if *apiServer != "" {
		client, err := apiClient(*caFile, *certFile, *keyFile)
		if err != nil {
			log.Fatal(err)
		}
		r.api, r.server = client, strings.TrimRight(*apiServer, "/")
	}
	r.RuntimeService.FakeStatus = &kubeapi.RuntimeStatus{Conditions: []*kubeapi.RuntimeCondition{
		{Type: kubeapi.RuntimeReady, Status: true},
		{Type: kubeapi.NetworkReady, Status: true},
	}}
	r.ImageService.FakeImageSize = 1 << 20 // the kubelet refuses an image of size 0
	r.RuntimeService.FakeLinuxConfiguration = &kubeapi.LinuxRuntimeConfiguration{CgroupDriver: kubeapi.CgroupDriver_CGROUPFS}
	_ = os.Remove(*listen)
	l, err := net.Listen("unix", *listen)
	if err != nil {
		log.Fatalf("listen on %s: %v", *listen, err)
	}
	server := grpc.NewServer()
	kubeapi.RegisterRuntimeServiceServer(server, r)
	kubeapi.RegisterImageServiceServer(server, r)
	go func() {
		// the fake records every call; forget them so a long run does not grow
		for range time.Tick(30 * time.Second) {
			r.RuntimeService.Lock()
			r.RuntimeService.Called = nil
			r.RuntimeService.Unlock()
			r.ImageService.Lock()
			r.ImageService.Called = nil
			r.ImageService.Unlock()
		}
	}()
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		server.Stop()
	}()
	log.Printf("fakecri serving CRI on %s (CDI specs: %s; views: %s)", *listen, *cdiDir, *containersDir)
	if err := server.Serve(l); err != nil {
		log.Fatal(err)
	}
}
