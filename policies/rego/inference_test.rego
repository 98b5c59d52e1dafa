# Unit tests for data.ignara.inference. Fixtures: fixtures_test.rego.
package ignara.inference_test

import data.ignara.fixtures_test as fx
import data.ignara.inference

call := {"tenant": "acme", "model": "llama-70b", "queue": "acme-main"}

test_open_model_through_own_queue_is_allowed if {
	tenants := fx.tenants
	models := fx.models
	d := inference.decision with input as call
		with data.ignara.tenants as tenants
		with data.ignara.models as models
	d == fx.allowed
}

test_unknown_model_is_refused if {
	tenants := fx.tenants
	models := fx.models
	c := object.union(call, {"model": "gpt-9"})
	d := inference.decision with input as c
		with data.ignara.tenants as tenants
		with data.ignara.models as models
	d.allow == false
	d.reasons == ["model \"gpt-9\" does not exist"]
}

test_model_outside_the_allow_list_is_refused if {
	tenants := fx.tenants
	models := fx.models
	c := object.union(call, {"model": "mistral-7b"})
	d := inference.decision with input as c
		with data.ignara.tenants as tenants
		with data.ignara.models as models
	d.allow == false
	d.reasons == ["model \"mistral-7b\" is not open to tenant \"acme\""]
}

test_model_on_a_flavor_the_tenant_lacks_is_refused if {
	tenants := fx.tenants
	models := fx.models
	c := {"tenant": "globex", "model": "llama-70b", "queue": "globex-main"}
	d := inference.decision with input as c
		with data.ignara.tenants as tenants
		with data.ignara.models as models
	d.allow == false
	d.reasons == ["flavor \"h100\" of model \"llama-70b\" is not open to tenant \"globex\""]
}

test_another_tenants_queue_is_refused if {
	tenants := fx.tenants
	models := fx.models
	c := object.union(call, {"queue": "globex-main"})
	d := inference.decision with input as c
		with data.ignara.tenants as tenants
		with data.ignara.models as models
	d.allow == false
	d.reasons == ["queue \"globex-main\" is not open to tenant \"acme\""]
}

test_suspended_tenant_is_refused if {
	tenants := fx.tenants
	models := fx.models
	c := {"tenant": "initech", "model": "mistral-7b", "queue": "initech-main"}
	d := inference.decision with input as c
		with data.ignara.tenants as tenants
		with data.ignara.models as models
	d.allow == false
	"tenant \"initech\" is suspended" in d.reasons
}

test_malformed_input_is_refused if {
	tenants := fx.tenants
	models := fx.models
	d := inference.decision with input as {"tenant": 7}
		with data.ignara.tenants as tenants
		with data.ignara.models as models
	d.allow == false
	"input.tenant is missing or not a string" in d.reasons
	"input.model is missing or not a string" in d.reasons
	"input.queue is missing or not a string" in d.reasons
}
