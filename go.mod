module github.com/tollway/tollway

go 1.26.0

// Why each direct dependency is here:
require (
	github.com/envoyproxy/go-control-plane v0.14.0 // xDS snapshot cache and ADS server
	github.com/envoyproxy/go-control-plane/envoy v1.40.0 // Envoy API types with their protoc-gen-validate rules (ValidateAll)
	github.com/ethereum/go-ethereum v1.17.5 // x402: EIP-712 hashing (signer/core/apitypes) and secp256k1 recovery (crypto) to verify payment credentials locally; v1.17.5 is the newest that moves no other pin
	github.com/go-json-experiment/json v1.27.2 // encoding/json/v2's tokenizer (stable in Go 1.27's standard library): validates chat bodies in one pass without copying base64 images
	github.com/go-viper/mapstructure/v2 v2.5.0 // viper's decoder: strict decode hooks and its typed errors, said in config terms (v2.5.0: the OTLP exporter's grpc-gateway needs it)
	github.com/golang-jwt/jwt/v5 v5.3.1 // Kling signs with an HS256 JWT the caller makes
	github.com/jackc/pgx/v5 v5.13.0 // store/postgres: the driver (pgxpool's bounded pool, LISTEN/NOTIFY on a connection of its own, NUMERIC as exact big.Int and exponent)
	github.com/jackc/tern/v2 v2.3.4 // store/postgres: versioned migrations from an embed.FS, run under its own pg_advisory_lock so replicas starting at once take turns (pgx's own, rather than hand-written versioning)
	github.com/prometheus/client_golang v1.24.1 // GET /metrics: counters, histograms, the text exposition; v1.24.1 is the newest that moves no other pin
	github.com/prometheus/common v0.70.1 // e2e: expfmt parses the /metrics exposition (client_golang's own dependency)
	github.com/spf13/viper v1.21.0 // config: file, TOLLWAY_* environment overrides
	github.com/tsenart/vegeta/v12 v12.13.0 // make bench: fixed-rate load generation
	go.etcd.io/bbolt v1.5.0 // the store
	go.uber.org/goleak v1.3.0 // tests only: no goroutine of the gateway outlives `tollway run` or a Gateway's Close
	go.yaml.in/yaml/v3 v3.0.5 // golden files rendered as YAML
	golang.org/x/image v0.47.0 // WebP headers: a first-frame image is checked by its decoded size, not its declared type
	golang.org/x/sys v0.49.0 // inotify for the config watch with its own event mask (fsnotify asks for every write in the directory); statfs and fallocate for the store's health and reserve
	google.golang.org/grpc v1.85.0 // ext_proc and xDS servers
	google.golang.org/protobuf v1.36.12 // protojson, Any
	k8s.io/api v0.37.2 // tests only: the Kubernetes manifests in configs/deploy decoded strictly into their API types
	sigs.k8s.io/yaml v1.6.0 // tests only: strict YAML decoding of those manifests (Kubernetes' own YAML rules)
)

require (
	github.com/pkoukk/tiktoken-go v0.1.8 // real tokenizer for estimated bills (cut streams, no usage)
	github.com/pkoukk/tiktoken-go-loader v0.0.2 // the BPE files embedded, so nothing is downloaded at run time
	github.com/shopspring/decimal v1.4.0 // exact decimal money (no float64 on the money path)
	pgregory.net/rapid v1.3.0 // property tests (store: random batches of valid and invalid usage records), with shrinking
)

require (
	github.com/prometheus/client_model v0.6.3
	go.opentelemetry.io/otel v1.47.0 // tracing: ext_proc's spans (W3C trace context, attributes), under Envoy's own
	go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc v1.47.0 // tracing: ext_proc's spans sent over OTLP/gRPC to the collector Envoy's tracer uses
	go.opentelemetry.io/otel/sdk v1.47.0 // tracing: the tracer provider, its batching and the parent-based sampler (Envoy samples)
	go.opentelemetry.io/otel/trace v1.47.0 // tracing: span contexts read from ext_proc's gRPC metadata
	go.opentelemetry.io/proto/otlp v1.11.0 // tests and make bench only: the OTLP/gRPC receiver (test/otlp) spans are asserted on
	golang.org/x/net v0.60.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260928230214-8a89bd6388cc
)

require (
	cel.dev/expr v0.25.3 // indirect
	dario.cat/mergo v1.0.1 // indirect
	github.com/Masterminds/goutils v1.1.1 // indirect
	github.com/Masterminds/semver/v3 v3.3.0 // indirect
	github.com/Masterminds/sprig/v3 v3.3.0 // indirect
	github.com/ProjectZKM/Ziren/crates/go-runtime/zkvm_runtime v0.0.0-20251001021608-1fe7b43fc4d6 // indirect
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/bitfield/gotestdox v0.2.2 // indirect
	github.com/bits-and-blooms/bitset v1.20.0 // indirect
	github.com/cenkalti/backoff/v5 v5.0.3 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/cncf/xds/go v0.0.0-20260202195803-dba9d589def2 // indirect
	github.com/consensys/gnark-crypto v0.18.1 // indirect
	github.com/crate-crypto/go-eth-kzg v1.5.0 // indirect
	github.com/decred/dcrd/dcrec/secp256k1/v4 v4.0.1 // indirect
	github.com/dlclark/regexp2 v1.10.0 // indirect
	github.com/dnephin/pflag v1.0.7 // indirect
	github.com/envoyproxy/go-control-plane/ratelimit v0.1.0 // indirect
	github.com/envoyproxy/protoc-gen-validate v1.3.3 // indirect
	github.com/ethereum/c-kzg-4844/v2 v2.1.8 // indirect
	github.com/fatih/color v1.18.0 // indirect
	github.com/fsnotify/fsnotify v1.9.0 // indirect
	github.com/fxamacker/cbor/v2 v2.9.1 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/google/shlex v0.0.0-20191202100458-e7afc7fbc510 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/grpc-ecosystem/grpc-gateway/v2 v2.30.0 // indirect
	github.com/holiman/uint256 v1.3.2 // indirect
	github.com/huandu/xstrings v1.5.0 // indirect
	github.com/influxdata/tdigest v0.0.1 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/josharian/intern v1.0.0 // indirect
	github.com/json-iterator/go v1.1.12 // indirect
	github.com/kylelemons/godebug v1.1.0 // indirect
	github.com/mailru/easyjson v0.7.7 // indirect
	github.com/mattn/go-colorable v0.1.13 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	github.com/mitchellh/copystructure v1.2.0 // indirect
	github.com/mitchellh/reflectwalk v1.0.2 // indirect
	github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd // indirect
	github.com/modern-go/reflect2 v1.0.3-0.20250322232337-35a7c28c31ee // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/pelletier/go-toml/v2 v2.2.4 // indirect
	github.com/planetscale/vtprotobuf v0.6.1-0.20240319094008-0393e58bdf10 // indirect
	github.com/prometheus/procfs v0.21.1 // indirect
	github.com/rs/dnscache v0.0.0-20230804202142-fc85eb664529 // indirect
	github.com/sagikazarmark/locafero v0.11.0 // indirect
	github.com/sourcegraph/conc v0.3.1-0.20240121214520-5f936abd7ae8 // indirect
	github.com/spf13/afero v1.15.0 // indirect
	github.com/spf13/cast v1.10.0 // indirect
	github.com/spf13/pflag v1.0.10 // indirect
	github.com/subosito/gotenv v1.6.0 // indirect
	github.com/supranational/blst v0.3.16 // indirect
	github.com/x448/float16 v0.8.4 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel/exporters/otlp/otlptrace v1.47.0 // indirect
	go.opentelemetry.io/otel/log v1.47.0 // indirect
	go.opentelemetry.io/otel/metric v1.47.0 // indirect
	go.yaml.in/yaml/v2 v2.4.4 // indirect
	golang.org/x/crypto v0.57.0 // indirect
	golang.org/x/mod v0.41.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/term v0.46.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	golang.org/x/tools v0.51.0 // indirect
	google.golang.org/genproto/googleapis/api v0.0.0-20260928230214-8a89bd6388cc // indirect
	gopkg.in/inf.v0 v0.9.1 // indirect
	gotest.tools/gotestsum v1.13.0 // indirect
	k8s.io/apimachinery v0.37.2 // indirect
	k8s.io/klog/v2 v2.140.0 // indirect
	k8s.io/kube-openapi v0.0.0-20260721132016-d427ff9ee9ad // indirect
	k8s.io/utils v0.0.0-20260626114624-be93311217bd // indirect
	sigs.k8s.io/json v0.0.0-20250730193827-2d320260d730 // indirect
	sigs.k8s.io/randfill v1.0.0 // indirect
	sigs.k8s.io/structured-merge-diff/v6 v6.4.2 // indirect
)

// make test runs go test through gotestsum (go tool gotestsum): readable progress, the JSON
// event log, and the slowest tests listed at the end (gotestsum tool slowest).
tool gotest.tools/gotestsum
