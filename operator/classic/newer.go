package classic

import (
	"fmt"
	"net/http"
	"reflect"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/opzero/opzero/operator"
)

// opRuntime embeds the Runtime one level down in adopted, so that the
// methods adopted takes from its embedded manager.Manager win over the
// Runtime's of the same name (GetEventRecorder, whose result type differs).
type opRuntime struct{ *operator.Runtime }

// GetScheme is the Runtime's scheme.
func (m *adopted) GetScheme() *runtime.Scheme { return m.Runtime.GetScheme() }

// GetEventRecorderFor is the Runtime's core/v1 recorder, which writes each
// Event before the event's answer.
func (m *adopted) GetEventRecorderFor(name string) record.EventRecorder {
	return m.Runtime.GetEventRecorderFor(name)
}

// newer are the methods of manager.Manager that controller-runtime added
// after v0.21 (the oldest version opzero supports) with types v0.21 cannot
// name, so adopted cannot declare them: GetEventRecorder (v0.23, an
// events.k8s.io recorder) and GetConverterRegistry (v0.24).
var newer = []string{"GetEventRecorder", "GetConverterRegistry"}

// newerMethods returns a controller-runtime manager, built from cfg and
// never started, that gives adopted the methods in newer when the linked
// controller-runtime has them; nil when it has none. Its GetEventRecorder
// sends Events from a goroutine (controller-runtime's broadcaster), not
// before returning as the Runtime's recorders do; its converters are only
// used behind /convert, which Start refuses.
func newerMethods(cfg *rest.Config, mapper meta.RESTMapper, mo manager.Options) (manager.Manager, error) {
	t := reflect.TypeFor[manager.Manager]()
	has := false
	for _, name := range newer {
		_, ok := t.MethodByName(name)
		has = has || ok
	}
	if !has || cfg == nil {
		return nil, nil
	}
	mgr, err := manager.New(cfg, manager.Options{Scheme: mo.Scheme, Logger: mo.Logger,
		MapperProvider:         func(*rest.Config, *http.Client) (meta.RESTMapper, error) { return mapper, nil },
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return nil, fmt.Errorf("the manager for controller-runtime's newer methods (%v): %w", newer, err)
	}
	return mgr, nil
}
