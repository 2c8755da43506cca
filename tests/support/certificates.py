"""A certificate authority made at run time for the secured tests: a CA, server certificates for loopback,
client certificates for mutual TLS, and the bad ones a refusal test needs (expired, from another CA).

Files are PEM. A key and its certificate chain are written together (``<name>.pem``, the key first), the
layout Kafka's ``ssl.keystore.type=PEM`` and librdkafka's ``ssl.keystore.location`` alike read; keys are
PKCS#8 and unencrypted unless a password is given. :meth:`CertificateAuthority.keystore` also writes one as a
PKCS#12 key store, for a Java server that reads no PEM (S3Proxy's Jetty).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

LOOPBACK_NAMES = (x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")))


@dataclass(frozen=True)
class Issued:
    """A key and certificate on disk: ``pem`` holds both (key first), ``cert`` the certificate alone."""

    pem: Path
    cert: Path
    key: Path


class CertificateAuthority:
    """``CertificateAuthority(dir)``; :meth:`issue` signs a leaf; :attr:`ca_file` is what clients trust."""


    def __init__(self, directory: Path, name: str = "Floe test CA") -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.timezone.utc)
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        self._name = subject
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1))
            .not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self.ca_file = self.directory / f"{_slug(name)}.crt"
        self.ca_file.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, common_name: str, *, server: bool = False, expired: bool = False,
              key_password: str | None = None) -> Issued:
        """A leaf certificate for ``common_name``: a server's names loopback; ``expired`` ended yesterday."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.timezone.utc)
        start, end = (now - dt.timedelta(days=10), now - dt.timedelta(days=1)) if expired else \
            (now - dt.timedelta(days=1), now + dt.timedelta(days=30))
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName(list(LOOPBACK_NAMES)), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        encryption = serialization.NoEncryption() if key_password is None else \
            serialization.BestAvailableEncryption(key_password.encode())
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
        chain = cert.public_bytes(serialization.Encoding.PEM) + self._cert.public_bytes(serialization.Encoding.PEM)
        stem = self.directory / _slug(common_name + ("-expired" if expired else ""))
        paths = Issued(stem.with_suffix(".pem"), stem.with_suffix(".crt"), stem.with_suffix(".key"))
        paths.pem.write_bytes(key_pem + chain)
        paths.cert.write_bytes(chain)
        paths.key.write_bytes(key_pem)
        for path in (paths.pem, paths.key):
            path.chmod(0o600)
        return paths


def keystore(issued: Issued, password: str) -> Path:
    """``issued``'s key and chain as a PKCS#12 key store (``<name>.p12``) under ``password``, in the legacy
    encryption every Java 17 reads."""
    from cryptography.hazmat.primitives.serialization import pkcs12

    key = serialization.load_pem_private_key(issued.key.read_bytes(), password=None)
    cert, *chain = x509.load_pem_x509_certificates(issued.cert.read_bytes())
    encryption = (
        serialization.PrivateFormat.PKCS12.encryption_builder()
        .kdf_rounds(50_000)
        .key_cert_algorithm(pkcs12.PBES.PBESv1SHA1And3KeyTripleDESCBC)
        .hmac_hash(hashes.SHA1())
        .build(password.encode())
    )
    path = issued.pem.with_suffix(".p12")
    path.write_bytes(pkcs12.serialize_key_and_certificates(b"server", key, cert, chain, encryption))
    return path


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")
