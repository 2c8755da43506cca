"""A KRaft broker that demands authentication and authorizes by ACL, as a platform team runs Kafka.

The same broker as :class:`service.local_kafka.LocalKafka`, with three more listeners on loopback:

* ``SASL_SSL``: TLS with the test CA's server certificate, then SASL (SCRAM-SHA-512 or PLAIN);
* ``MTLS``: TLS with client certificates required, the principal the certificate's CN;
* ``INTERNAL``: plaintext, between the broker and itself and for the tests' own set-up (topics, ACLs),
  as an operator's admin connection. Nothing of Floe's may use it.

``StandardAuthorizer`` decides every request: ``allow.everyone.if.no.acl.found`` is off, so a principal
may do only what an ACL grants. The SCRAM credentials are written into the storage at format time.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from service.local_kafka import LocalKafka, broker_properties, kept_port
from tests.support.certificates import CertificateAuthority

ADMIN = "admin"


@dataclass(frozen=True)
class Grant:
    """One ACL: ``principal`` may do ``operation`` on the ``resource`` named ``name`` (literal or prefix)."""

    principal: str
    resource: ResourceType
    name: str
    operation: AclOperation
    prefixed: bool = False

    def binding(self) -> AclBinding:
        pattern = ResourcePatternType.PREFIXED if self.prefixed else ResourcePatternType.LITERAL
        return AclBinding(self.resource, self.name, pattern, f"User:{self.principal}", "*", self.operation,
                          AclPermissionType.ALLOW)


class SecuredKafka(LocalKafka):
    """``with SecuredKafka(dir, users={"floe": "pw"}) as kafka:``; :attr:`sasl_bootstrap` and
    :attr:`mtls_bootstrap` are Floe's listeners, :attr:`bootstrap` the operator's."""

    def __init__(self, work_dir: Path, users: dict[str, str], **kwargs: object) -> None:
        super().__init__(work_dir, **kwargs)  # type: ignore[arg-type]
        self.users = {ADMIN: "admin-secret", **users}
        self.ca = CertificateAuthority(self.work_dir / "ca")
        self.server = self.ca.issue("kafka-broker", server=True)
        self.sasl_port, self.mtls_port = kept_port(), kept_port()
        self.sasl_bootstrap = f"127.0.0.1:{self.sasl_port}"
        self.mtls_bootstrap = f"127.0.0.1:{self.mtls_port}"

    def grant(self, *grants: Grant) -> None:
        """Create ACLs (through the operator's listener) and wait until the broker applies them."""
        if not grants:
            return
        admin = AdminClient({"bootstrap.servers": str(self.bootstrap)})
        for future in admin.create_acls([g.binding() for g in grants], request_timeout=30).values():
            future.result()

    def _write_config(self, broker_port: int, controller_port: int) -> Path:
        config = super()._write_config(broker_port, controller_port)
        plain = " ".join(f'user_{name}="{password}"' for name, password in self.users.items())
        lines = broker_properties(self.work_dir / "data", broker_port, controller_port).splitlines()
        secured = {
            "listeners": f"INTERNAL://127.0.0.1:{broker_port},SASL_SSL://127.0.0.1:{self.sasl_port},"
                         f"MTLS://127.0.0.1:{self.mtls_port},CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": f"INTERNAL://127.0.0.1:{broker_port},SASL_SSL://127.0.0.1:{self.sasl_port},"
                                    f"MTLS://127.0.0.1:{self.mtls_port}",
            "inter.broker.listener.name": "INTERNAL",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,INTERNAL:PLAINTEXT,SASL_SSL:SASL_SSL,MTLS:SSL",
        }
        kept = [line for line in lines if line.split("=", 1)[0] not in secured]
        kept += [f"{key}={value}" for key, value in secured.items()]
        kept += [
            "sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config="
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            f"listener.name.sasl_ssl.plain.sasl.jaas.config="
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain};",
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={self.server.pem}",
            "ssl.truststore.type=PEM",
            f"ssl.truststore.location={self.ca.ca_file}",
            "listener.name.mtls.ssl.client.auth=required",
            "ssl.principal.mapping.rules=RULE:^CN=([^,]*)$/$1/,DEFAULT",
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            # The controller and INTERNAL listeners are plaintext: their principal is ANONYMOUS.
            f"super.users=User:ANONYMOUS;User:{ADMIN}",
            "allow.everyone.if.no.acl.found=false",
            "",
        ]
        config.write_text("\n".join(kept))
        return config

    def _format_options(self) -> list[str]:
        return [arg for name, password in self.users.items()
                for arg in ("--add-scram", f"SCRAM-SHA-512=[name={name},password={password}]")]
