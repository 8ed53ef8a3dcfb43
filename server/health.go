package server

import (
	_ "embed"
	"fmt"
	"net/http"
)

func (s *Server) handleHealth(c *call) error {
	c.answer = answer{http.StatusOK, map[string]string{"estado": "ok"}}
	return nil
}

// handleReady answers 503 until the store is open and recovery is done.
func (s *Server) handleReady(c *call) error {
	if s.Ready == nil || !s.Ready() {
		c.answer = answer{http.StatusServiceUnavailable, map[string]string{"estado": "iniciando"}}
		return nil
	}
	if sp := s.DB.Space(); sp.Low || sp.Failed {
		motivo := fmt.Sprintf("espacio libre %d MiB por debajo de la reserva de %d MiB: se rechazan las escrituras hasta que haya espacio",
			sp.Avail>>20, sp.Reserve>>20)
		switch {
		case sp.Failed && sp.NoSpace && sp.Resumes:
			motivo = "una escritura falló dentro del almacén por falta de espacio: coupond se reinicia solo, en el mismo proceso y sin cerrar el puerto, en cuanto el disco tenga espacio libre; libere espacio"
		case sp.Failed && sp.NoSpace:
			motivo = "una escritura falló dentro del almacén por falta de espacio: libere espacio y reinicie coupond"
		case sp.Failed && sp.NoFiles && sp.Resumes:
			motivo = "una escritura falló dentro del almacén por falta de descriptores de archivo: coupond se reinicia solo, en el mismo proceso y sin cerrar el puerto, en cuanto pueda abrir archivos de nuevo; revise su límite de archivos abiertos (LimitNOFILE)"
		case sp.Failed && sp.NoFiles:
			motivo = "una escritura falló dentro del almacén por falta de descriptores de archivo: eleve el límite de archivos abiertos (LimitNOFILE) y reinicie coupond"
		case sp.Failed:
			motivo = "una escritura falló dentro del almacén por un error de entrada/salida del disco: revise el disco y reinicie coupond"
		}
		c.answer = answer{http.StatusServiceUnavailable, map[string]string{"estado": "almacenamiento_lleno", "motivo": motivo}}
		return nil
	}
	c.answer = answer{http.StatusOK, map[string]string{"estado": "listo"}}
	return nil
}

func (s *Server) handleMetrics(c *call) error {
	s.metrics.handler().ServeHTTP(c.w, c.r)
	return nil
}

//go:embed openapi.json
var openAPIDoc []byte

func (s *Server) handleOpenAPI(c *call) error {
	c.w.Header().Set("Content-Type", "application/json")
	c.w.WriteHeader(http.StatusOK)
	c.w.Write(openAPIDoc)
	return nil
}

// Flush persists in-memory counters (daily quotas, credential last use).
func (s *Server) Flush() error {
	if s.Engine != nil {
		if err := s.Engine.Quotas.FlushQuotas(); err != nil {
			return err
		}
	}
	return s.DB.FlushLastUsed()
}
