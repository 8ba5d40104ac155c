"""The throwaway CA and certificate of `quorumq up --tls`: one certificate for every process of
the cluster, valid for 127.0.0.1 and localhost, as a server and as a client (members present it to
each other under tls.server.need.client.auth=require). The CA's key is never written: nothing can
be signed by it once `up` has made the certificate."""

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS = 365
HOSTS = ("127.0.0.1",)  # where `quorumq up` binds and advertises every process


def paths(directory: Path) -> dict[str, Path]:
    """Where `write` puts the CA, the certificate and its key, by the config key naming each."""
    return {"tls.server.trustCertPath": directory / "ca.pem", "tls.server.certPath": directory / "server.pem",
            "tls.server.keyPath": directory / "server.key"}


def _certificate(subject: str, public_key: ec.EllipticCurvePublicKey, issuer: x509.Name,
                 signer: ec.EllipticCurvePrivateKey, ca: bool, hosts: tuple[str, ...] = ()) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
               .issuer_name(issuer).public_key(public_key).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(hours=1))  # a peer's clock a little behind
               .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()),
                              critical=False))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=False, content_commitment=False, key_encipherment=False, data_encipherment=False,
            key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False),
            critical=True)
    else:
        builder = (builder
                   .add_extension(x509.SubjectAlternativeName(
                       [x509.IPAddress(ipaddress.ip_address(host)) for host in hosts] + [x509.DNSName("localhost")]),
                       critical=False)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                         ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
    return builder.sign(signer, hashes.SHA256())


def write(directory: Path, hosts: tuple[str, ...] = HOSTS) -> dict[str, Path]:
    """A new CA and a certificate it signed for the IP addresses `hosts` and localhost, in
    `directory` (the key readable by its owner alone). A member advertised at another address
    (brokerIP2) needs it among the hosts: its peers check the certificate against the address
    they dial."""
    directory.mkdir(parents=True, exist_ok=True)
    files = paths(directory)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "quorumq up throwaway CA")])
    ca = _certificate("quorumq up throwaway CA", ca_key.public_key(), ca_name, ca_key, ca=True)
    certificate = _certificate("quorumq", key.public_key(), ca_name, ca_key, ca=False, hosts=hosts)
    files["tls.server.trustCertPath"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files["tls.server.certPath"].write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path = files["tls.server.keyPath"]
    key_path.unlink(missing_ok=True)
    key_path.touch(mode=0o600)
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return files
